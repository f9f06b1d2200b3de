"""fxpool.loading: MODEL specs of the command line, built without downloading anything, and model files
that run no code unless the caller trusts them.

The crafted files hold a pickle whose ``__reduce__`` writes a marker file: each test asserts the marker
is absent after a refusal, and present where the caller opted in (so the file really would run code).
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from fxpool.loading import (
    TRUST_FLAG,
    ModelSpecError,
    UntrustedModelFileError,
    build_torchvision,
    load_model,
    unsafe_archive_members,
)


class WritesMarker:
    """Unpickling this calls ``Path.write_text(marker, "ran")``: code run by the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Path.write_text, (self.marker, "ran"))


def evil_pt(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    torch.save({"model": WritesMarker(marker)}, path)
    return path, marker


def program_file(tmp_path: Path, name: str = "pool.pt2") -> Path:
    program = torch.export.export(nn.Sequential(nn.Conv2d(2, 3, 1), nn.AdaptiveAvgPool2d(4)), (torch.randn(1, 2, 9, 9),))
    path = tmp_path / name
    torch.export.save(program, path)
    return path


def with_member_replaced(path: Path, ending: str, content: bytes, out: Path) -> Path:
    """A copy of the archive at ``path`` whose member ending in ``ending`` holds ``content``."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as target:
        replaced = 0
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith(ending):
                data, replaced = content, replaced + 1
            target.writestr(info, data)
    assert replaced == 1, f"no member ends with {ending}"
    return out


def test_torchvision_models_are_built_without_weights_in_eval_mode() -> None:
    loaded = load_model("torchvision:alexnet")
    assert isinstance(loaded.model, nn.Module) and not loaded.model.training
    assert loaded.weights.startswith("random")
    detector = build_torchvision("fasterrcnn_mobilenet_v3_large_320_fpn")  # weights_backbone=None as well
    assert not detector.training


def test_module_and_file_specs(tmp_path, monkeypatch) -> None:
    assert isinstance(load_model("torch.nn:Identity").model, nn.Identity)
    source = tmp_path / "mine.py"
    source.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(3))\n")
    model = load_model(f"{source}:build").model
    assert model(torch.randn(1, 2, 7, 7)).shape == (1, 2, 3, 3) and not model.training
    # module:callable finds a module of the current folder, as `python -m fxpool` does, and leaves sys.path as it was
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    assert isinstance(load_model("mine:build").model, nn.Sequential)
    assert sys.path == path_before
    sys.modules.pop("mine", None)


def test_timm_pretrained_takes_weights_from_the_local_cache_only(tmp_path, monkeypatch) -> None:
    timm = pytest.importorskip("timm")
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = load_model("timm:resnet18", pretrained=True)  # an empty cache: random weights, and said
    assert isinstance(loaded.model, nn.Module) and not loaded.model.training
    assert loaded.weights.startswith("random") and "cache" in loaded.weights
    # the same weights a download would have put in the cache
    safetensors = pytest.importorskip("safetensors.torch")
    hub_id = timm.models.get_pretrained_cfg("resnet18").hf_hub_id
    repo = tmp_path / "hub" / f"models--{hub_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    weights = timm.create_model("resnet18").state_dict()
    safetensors.save_file(weights, str(repo / "snapshots" / ("0" * 40) / "model.safetensors"))
    loaded = load_model("timm:resnet18", pretrained=True)
    assert loaded.weights.startswith("pretrained, from the local cache")
    torch.testing.assert_close(loaded.model.state_dict()["fc.weight"], weights["fc.weight"], rtol=0, atol=0)


def test_hugging_face_specs_build_from_a_local_folder(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    config.architectures = ["ResNetForImageClassification"]
    config.save_pretrained(tmp_path / "tiny")
    loaded = load_model(f"hf:{tmp_path / 'tiny'}")
    assert type(loaded.model).__name__ == "ResNetForImageClassification" and loaded.weights.startswith("random")
    loaded.model.save_pretrained(tmp_path / "tiny")  # weights beside the config: --pretrained loads them
    again = load_model(f"hf:{tmp_path / 'tiny'}", pretrained=True)
    assert again.weights.startswith("pretrained")
    for name, tensor in loaded.model.state_dict().items():
        torch.testing.assert_close(again.model.state_dict()[name], tensor, rtol=0, atol=0)
    with pytest.raises(ModelSpecError, match="no Hugging Face config"):
        load_model(f"hf:{tmp_path / 'missing'}")


@pytest.mark.parametrize(
    "spec,message",
    [
        ("alexnet", "expected one of torchvision:NAME"),
        ("torchvision:nope", "no model 'nope'"),
        ("/no/such.py:build", "no file"),
        ("timm:no_such_model", "timm has no model"),
        ("no_such_module_here:build", r"for a file, name it by its path: no_such_module_here\.py:build"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=message):
        load_model(spec)


def test_weights_options_apply_to_their_own_spec_forms() -> None:
    with pytest.raises(ModelSpecError, match="--weights applies to torchvision:NAME only"):
        load_model("timm:resnet18", weights="DEFAULT")
    with pytest.raises(ModelSpecError, match="--pretrained applies to timm:NAME and hf:ID only"):
        load_model("torchvision:alexnet", pretrained=True)


def test_a_pt2_file_gives_its_exported_program(tmp_path) -> None:
    path = program_file(tmp_path)
    assert unsafe_archive_members(path.read_bytes()) == []  # its sample inputs and weights are plain tensors
    loaded = load_model(str(path)).model
    assert isinstance(loaded, torch.export.ExportedProgram)
    x = torch.randn(1, 2, 9, 9)
    torch.testing.assert_close(loaded.module()(x), torch.export.load(path).module()(x))


def test_a_pt_file_is_read_weights_only_and_a_pickled_model_needs_the_opt_in(tmp_path) -> None:
    path = tmp_path / "whole.pt"
    torch.save(nn.Sequential(nn.Dropout(), nn.AdaptiveMaxPool2d(3)).train(), path)
    with pytest.raises(UntrustedModelFileError, match=f"would run code from the file.*{TRUST_FLAG}"):
        load_model(str(path))
    model = load_model(str(path), trust_file=True).model
    assert isinstance(model, nn.Sequential) and not model.training


def test_a_refusal_without_a_message_is_still_the_refusal(tmp_path, monkeypatch) -> None:
    """An UnpicklingError with an empty message once ended in an IndexError instead of the refusal."""
    import pickle

    path = tmp_path / "whole.pt"
    torch.save(nn.Sequential(nn.AdaptiveMaxPool2d(3)), path)

    def refuse(*args: object, **kwargs: object) -> None:
        raise pickle.UnpicklingError("")

    monkeypatch.setattr(torch, "load", refuse)
    with pytest.raises(UntrustedModelFileError, match=f"or other objects: \\); unpickling.*{TRUST_FLAG}"):
        load_model(str(path))


def test_a_crafted_pt_runs_no_code_without_the_opt_in(tmp_path) -> None:
    path, marker = evil_pt(tmp_path)
    with pytest.raises(UntrustedModelFileError, match="Nothing was loaded"):
        load_model(str(path))
    assert not marker.exists()
    with pytest.raises(ModelSpecError):  # trusted, it runs (this is what the opt-in means), then holds no model
        load_model(str(path), trust_file=True)
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("member", ["data/sample_inputs/model.pt", "data/weights/model_weights_config.json"])
def test_a_crafted_pt2_runs_no_code_without_the_opt_in(tmp_path, member: str) -> None:
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save(((WritesMarker(marker),), {}), buffer)
    if member.endswith(".json"):  # a weight turned into a pickle: the config says use_pickle, the member is evil
        source = program_file(tmp_path)
        with zipfile.ZipFile(source) as archive:
            config_name = next(n for n in archive.namelist() if n.endswith("model_weights_config.json"))
            config = archive.read(config_name).decode().replace('"use_pickle": false', '"use_pickle": true', 1)
            weight = next(n for n in archive.namelist() if "/data/weights/" in n and not n.endswith(".json"))
        step = with_member_replaced(source, config_name, config.encode(), tmp_path / "step.pt2")
        evil = with_member_replaced(step, weight, buffer.getvalue(), tmp_path / "evil.pt2")
    else:
        evil = with_member_replaced(program_file(tmp_path), member, buffer.getvalue(), tmp_path / "evil.pt2")
    with pytest.raises(UntrustedModelFileError, match=f"weights-only unpickler refuses.*{TRUST_FLAG}"):
        load_model(str(evil))
    assert not marker.exists()
    try:  # trusted, torch.export.load unpickles it: the file really runs code
        load_model(str(evil), trust_file=True)
    except ModelSpecError:
        pass
    assert marker.exists()


def test_a_pt_file_holding_a_state_dict_is_refused(tmp_path) -> None:
    path = tmp_path / "weights.pt"
    torch.save(nn.Linear(2, 2).state_dict(), path)
    with pytest.raises(ModelSpecError, match="not an nn.Module.*state_dict"):
        load_model(str(path))
    with pytest.raises(ModelSpecError, match="no file"):
        load_model(str(tmp_path / "missing.pt2"))
    (tmp_path / "junk.pt2").write_bytes(b"not a program")
    with pytest.raises(ModelSpecError, match="torch.export.load cannot read it"):
        load_model(str(tmp_path / "junk.pt2"))
