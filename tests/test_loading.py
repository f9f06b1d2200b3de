"""fxpool.loading: MODEL specs of the command line, built without downloading anything."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fxpool.loading import ModelSpecError, build_torchvision, load_model


def test_torchvision_models_are_built_without_weights_in_eval_mode() -> None:
    model = load_model("torchvision:alexnet")
    assert isinstance(model, nn.Module) and not model.training
    detector = build_torchvision("fasterrcnn_mobilenet_v3_large_320_fpn")  # weights_backbone=None as well
    assert not detector.training


def test_module_and_file_specs(tmp_path) -> None:
    assert isinstance(load_model("torch.nn:Identity"), nn.Identity)
    source = tmp_path / "mine.py"
    source.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(3))\n")
    model = load_model(f"{source}:build")
    assert model(torch.randn(1, 2, 7, 7)).shape == (1, 2, 3, 3) and not model.training


@pytest.mark.parametrize(
    "spec,message",
    [("alexnet", "expected torchvision:NAME"), ("torchvision:nope", "no model 'nope'"), ("/no/such.py:build", "no file")],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=message):
        load_model(spec)


def test_a_pt2_file_gives_its_exported_program(tmp_path) -> None:
    x = torch.randn(1, 2, 9, 9)
    program = torch.export.export(nn.Sequential(nn.AdaptiveAvgPool2d(4)), (x,))
    path = tmp_path / "pool.pt2"
    torch.export.save(program, path)
    loaded = load_model(str(path))
    assert isinstance(loaded, torch.export.ExportedProgram)
    torch.testing.assert_close(loaded.module()(x), program.module()(x))


def test_a_pt_file_gives_the_whole_pickled_model_in_eval_mode(tmp_path) -> None:
    path = tmp_path / "whole.pt"
    torch.save(nn.Sequential(nn.Dropout(), nn.AdaptiveMaxPool2d(3)).train(), path)
    model = load_model(str(path))
    assert isinstance(model, nn.Sequential) and not model.training


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
