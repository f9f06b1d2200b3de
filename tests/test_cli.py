"""The ``fxpool`` command line: export, inspect, zoo, and one message with exit 2 for each user mistake."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from fxpool import cli
from fxpool.verifying import op_histogram

EXPORT_TESTS = Path(__file__).with_name("test_export.py")  # holds IndicesHead, a model file for the CLI


def test_cli_export_and_inspect(tmp_path) -> None:
    out = tmp_path / "cli.onnx"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "fxpool.cli",
            "export",
            "torchvision:squeezenet1_1",
            "--input-shape",
            "1,3,96,96",
            "-o",
            str(out),
            "--exporter",
            "torchscript",
            "--dynamic-batch",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert out.exists() and "onnxruntime max abs error" in run.stdout
    onnx.checker.check_model(str(out))
    inspect = subprocess.run(
        [sys.executable, "-m", "fxpool.cli", "inspect", "torchvision:alexnet", "--input-shape", "1,3,160,160"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert inspect.returncode == 0 and "kron-matmul" in inspect.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "fxpool.cli", "inspect", "torchvision:nope", "--input-shape", "1,3,8,8"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "no model 'nope'" in bad.stderr
    assert op_histogram(str(out))["ReduceMean"] == 1


def test_cli_prints_the_report_and_exits_2_on_an_export_it_cannot_do(tmp_path) -> None:
    export = ["export", f"{EXPORT_TESTS}:IndicesHead", "--input-shape", "1,3,10,10", "--dynamic-hw", "-o", str(tmp_path / "m.onnx")]

    def cli(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fxpool.cli", *arguments], capture_output=True, text=True, timeout=300)

    run = cli(*export)
    assert run.returncode == 2, run.stderr
    assert "ExportFailedError" in run.stderr and "return_indices=True" in run.stderr
    assert "Traceback" not in run.stderr
    debug = cli("--debug", *export)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


CLI_USER_ERRORS = {  # name: (model file source or None for squeezenet, extra arguments, what stderr must say)
    "wrong input shape": (None, ["--input-shape", "1,5,64,64"], "ExampleInputError"),
    "factory raises": ("def build():\n    raise RuntimeError('no weights here')\n", [], "build() raised RuntimeError"),
    "file fails on import": ("import not_a_module_anywhere\n", [], "raised ModuleNotFoundError on import"),
    "callable needs arguments": ("def build(width):\n    pass\n", [], "must build the model with no arguments"),
    "missing output folder": (None, ["-o", "/nonexistent/folder/m.onnx"], "does not exist; create it first"),
    "unsupported opset": (None, ["--exporter", "torchscript", "--opset", "99"], "Unsupported onnx_opset_version: 99"),
}


@pytest.mark.parametrize("case", list(CLI_USER_ERRORS))
def test_cli_user_errors_are_one_message_and_exit_2(case: str, tmp_path) -> None:
    source, extra, expected = CLI_USER_ERRORS[case]
    model = "torchvision:squeezenet1_1"
    if source is not None:
        (tmp_path / "user_model.py").write_text(source)
        model = f"{tmp_path / 'user_model.py'}:build"
    arguments = ["export", model, "--input-shape", "1,3,64,64", "-o", str(tmp_path / "m.onnx")]
    arguments += extra  # argparse keeps the last of a repeated option
    run = subprocess.run([sys.executable, "-m", "fxpool.cli", *arguments], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert expected in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_zoo_takes_its_own_options_after_the_subcommand(monkeypatch) -> None:
    # argparse.REMAINDER does not take a leading option: `fxpool zoo --models alexnet` must reach the sweep.
    from model_zoo_checks import zoo

    seen = []
    monkeypatch.setattr(zoo, "main", lambda argv: seen.append(list(argv)) or 0)
    assert cli.main(["zoo", "--models", "alexnet", "--sizes", "160"]) == 0
    assert seen == [["--models", "alexnet", "--sizes", "160"]]


def test_cli_dtype_exports_a_bfloat16_graph_verified_as_its_float32_copy(tmp_path, capsys) -> None:
    out = tmp_path / "bf16.onnx"
    code = cli.main(["export", "torchvision:squeezenet1_1", "--input-shape", "1,3,64,64", "--dtype", "bfloat16", "-o", str(out)])
    assert code == 0
    assert onnx.load(str(out)).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    assert "a float32 copy of the graph" in capsys.readouterr().out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the message for a machine without CUDA")
def test_cli_device_cuda_without_cuda_is_one_clear_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["inspect", "torchvision:alexnet", "--input-shape", "1,3,64,64", "--device", "cuda"])
    assert exit_info.value.code == 2 and "torch sees no CUDA device" in capsys.readouterr().err


@pytest.mark.cuda
def test_cli_exports_on_cuda(tmp_path, capsys) -> None:
    out = tmp_path / "cuda.onnx"
    code = cli.main(["export", "torchvision:alexnet", "--input-shape", "1,3,160,160", "--device", "cuda", "-o", str(out)])
    assert code == 0 and out.exists() and "onnxruntime max abs error" in capsys.readouterr().out
