"""Output files: checked before any work, written atomically, every file named.

The fault suite asserts what is left on disk after each fault: a folder as the output, a missing or
unwritable folder, a graph that fails verification over a good earlier file, a file-size limit hit
mid-write (a full disk, for both exporters), and an exporting process killed while it writes. In every
case the earlier file at the target is byte-for-byte what it was, and no partial file is left beside it
(a killed process's staging folder is removed by the next export to the same target).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import fxpool
from fxpool import verifying
from fxpool.writing import STAGING_MARK, WrittenFile, check_output_path, human_size, staged_output

ROOT = Path(__file__).resolve().parents[1]


def pooled() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d((7, 7))).eval()


def big_model_source() -> str:
    """A model whose graph holds about 8 MB of weights, for the faults that hit mid-write."""
    return "nn.Sequential(nn.Conv2d(3, 512, 1), nn.Conv2d(512, 1024, 3), nn.Conv2d(1024, 8, 1), nn.AdaptiveAvgPool2d((7, 7)))"


def entries(folder: Path) -> dict[str, bytes | None]:
    """Every entry of ``folder``: a file's bytes, None for a folder."""
    return {p.name: (p.read_bytes() if p.is_file() else None) for p in folder.iterdir()}


def good_earlier_file(folder: Path) -> Path:
    target = folder / "m.onnx"
    fxpool.export(pooled(), torch.randn(1, 3, 10, 10), target, dynamo=False)
    return target


UNWRITABLE = Path("/sys/kernel")  # a folder no process may create files in, root included (Linux)


def test_check_output_path_refuses_what_cannot_be_an_output_file(tmp_path) -> None:
    assert check_output_path(tmp_path / "m.onnx") == tmp_path / "m.onnx"
    with pytest.raises(fxpool.OutputFileError, match="is a folder; give the file to write"):
        check_output_path(tmp_path)
    with pytest.raises(fxpool.OutputFileError, match="does not exist; create it first"):
        check_output_path(tmp_path / "missing" / "m.onnx")
    (tmp_path / "file").write_text("")
    with pytest.raises(fxpool.OutputFileError, match="is not a folder"):
        check_output_path(tmp_path / "file" / "m.onnx")
    assert human_size(531_200_000) == "531.2 MB" and human_size(12) == "12 B" and str(WrittenFile("a", 4000)) == "a (4.0 kB)"


@pytest.mark.parametrize("where", ["folder", "missing folder", "unwritable folder"])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_work(where: str, tmp_path, monkeypatch) -> None:
    import fxpool.exporting

    if where == "unwritable folder" and not UNWRITABLE.is_dir():
        pytest.skip("needs Linux's /sys")
    output = {"folder": tmp_path, "missing folder": tmp_path / "no" / "m.onnx", "unwritable folder": UNWRITABLE / "m.onnx"}[where]
    converted = []
    monkeypatch.setattr(fxpool.exporting, "convert", lambda *a, **k: converted.append(1) or pytest.fail("converted"))
    before = entries(tmp_path)
    with pytest.raises(fxpool.OutputFileError, match="is a folder|does not exist|cannot write in") as raised:
        fxpool.export(pooled(), torch.randn(1, 3, 10, 10), output)
    assert str(output if where == "folder" else output.parent) in str(raised.value) and not converted
    assert entries(tmp_path) == before


def test_a_failed_verification_keeps_the_earlier_file_and_sets_the_new_graph_aside(tmp_path, monkeypatch) -> None:
    target = good_earlier_file(tmp_path)
    good = target.read_bytes()
    monkeypatch.setattr(verifying, "run_onnxruntime", lambda path, args, **_: [torch.zeros(1, 4, 7, 7).numpy()])
    with pytest.raises(fxpool.ExportVerificationError, match=r"set aside in .*m\.onnx\.failed.*was left as it was"):
        fxpool.export(pooled(), torch.randn(1, 3, 10, 10), target)  # dynamo: the graph and its external data
    assert target.read_bytes() == good
    failed = tmp_path / "m.onnx.failed"
    assert sorted(p.name for p in failed.iterdir()) == ["m.onnx", "m.onnx.data"]
    assert sorted(entries(tmp_path)) == ["m.onnx", "m.onnx.failed"]  # nothing else beside it
    with pytest.raises(fxpool.ExportVerificationError):  # a second failure replaces the first one set aside
        fxpool.export(pooled(), torch.randn(1, 3, 10, 10), target, dynamo=False)
    assert sorted(p.name for p in failed.iterdir()) == ["m.onnx"] and target.read_bytes() == good


def test_a_graph_of_another_opset_than_asked_is_set_aside(tmp_path, monkeypatch) -> None:
    import fxpool.exporting
    from fxpool.exporting import check_written_opset

    path = tmp_path / "m.onnx"
    fxpool.export(pooled(), torch.randn(1, 3, 10, 10), path, dynamo=False, opset_version=13)
    with pytest.raises(fxpool.UnsupportedOpsetError, match="the exporter wrote opset 13 instead"):
        check_written_opset(str(path), 11)
    good = path.read_bytes()
    monkeypatch.setattr(fxpool.exporting, "check_written_opset", lambda p, o: check_written_opset(p, 11))
    with pytest.raises(fxpool.UnsupportedOpsetError, match="set aside in"):
        fxpool.export(pooled(), torch.randn(1, 3, 10, 10), path, dynamo=False, opset_version=13)
    assert path.read_bytes() == good and (tmp_path / "m.onnx.failed" / "m.onnx").is_file()


def test_every_file_written_is_named_with_its_size(tmp_path) -> None:
    result = fxpool.export(pooled(), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx")
    assert [Path(f.path).name for f in result.files] == ["m.onnx.data", "m.onnx"]  # the graph last
    assert all(f.size == os.path.getsize(f.path) for f in result.files)
    assert sorted(entries(tmp_path)) == ["m.onnx", "m.onnx.data"]
    single = fxpool.export(pooled(), torch.randn(1, 3, 10, 10), tmp_path / "one.onnx", external_data=False)
    assert [Path(f.path).name for f in single.files] == ["one.onnx"]


def run_python(script: str, **options) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_a_full_disk_leaves_the_earlier_file_and_nothing_else(dynamo: bool, tmp_path) -> None:
    target = good_earlier_file(tmp_path)
    before = entries(tmp_path)
    limit = 2 * 1024 * 1024  # smaller than the big model's weights (about 8 MB), larger than any small file
    script = f"""
        import resource, torch, fxpool
        from torch import nn
        model = {big_model_source()}.eval()
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        try:
            fxpool.export(model, torch.randn(1, 3, 10, 10), {str(target)!r}, dynamo={dynamo})
        except fxpool.OutputFileError as error:
            print("OutputFileError:", error)
        """
    run = run_python(script)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err[-3000:]
    assert out.startswith("OutputFileError:"), (out, err[-2000:])
    assert entries(tmp_path) == before


def test_a_killed_export_leaves_the_earlier_file_and_the_next_export_clears_its_staging(tmp_path) -> None:
    target = good_earlier_file(tmp_path)
    before = entries(tmp_path)
    script = f"""
        import torch, fxpool
        from torch import nn
        fxpool.export({big_model_source()}.eval(), torch.randn(1, 3, 10, 10), {str(target)!r}, dynamo=False)
        """
    run = run_python(script)
    deadline = time.monotonic() + 300
    staging: list[Path] = []
    while time.monotonic() < deadline and run.poll() is None:  # kill it as soon as the exporter's file appears
        staging = [p for p in tmp_path.iterdir() if STAGING_MARK in p.name and any(p.iterdir())]
        if staging:
            break
        time.sleep(0.005)
    assert staging, "the export finished before its file appeared: nothing was killed"
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=60)
    assert target.read_bytes() == before["m.onnx"]
    assert {name for name in entries(tmp_path) if STAGING_MARK not in name} == set(before)
    fxpool.export(pooled(), torch.randn(1, 3, 10, 10), target, dynamo=False)  # the next export clears the dead one's folder
    assert sorted(entries(tmp_path)) == ["m.onnx"]


def test_staging_removes_its_folder_whatever_happens(tmp_path) -> None:
    with pytest.raises(RuntimeError), staged_output(tmp_path / "m.onnx") as staging:
        Path(staging.path).write_bytes(b"partial")
        raise RuntimeError("the exporter failed")
    assert list(tmp_path.iterdir()) == []
