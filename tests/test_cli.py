"""The ``fxpool`` command line: export, inspect, zoo; exit 0 ok, 1 the model fails, 2 a usage error, each one message;
``--json`` on failure too; ``--help`` and ``--version`` fast and plain."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from fxpool import cli
from fxpool import cli as cli_module
from fxpool.verifying import op_histogram

EXPORT_TESTS = Path(__file__).with_name("models.py")  # holds IndicesHead, a model file for the CLI


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
    assert inspect.returncode == 0 and "sliding" in inspect.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "fxpool.cli", "inspect", "torchvision:nope", "--input-shape", "1,3,8,8"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "no model 'nope'" in bad.stderr
    assert op_histogram(str(out))["ReduceMean"] == 1


def test_cli_prints_the_report_and_exits_1_on_an_export_the_model_fails(tmp_path) -> None:
    export = ["export", f"{EXPORT_TESTS}:IndicesHead", "--input-shape", "1,3,10,10", "--dynamic-hw", "-o", str(tmp_path / "m.onnx")]

    def cli(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fxpool.cli", *arguments], capture_output=True, text=True, timeout=300)

    run = cli(*export)
    assert run.returncode == 1, run.stderr
    assert "ExportFailedError" in run.stderr and "return_indices=True" in run.stderr
    assert "Traceback" not in run.stderr
    debug = cli("--debug", *export)
    assert debug.returncode == 1 and "Traceback" in debug.stderr  # the same status, the traceback too
    as_json = cli(*export, "--json")
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert answer["schema_version"] == cli_module.JSON_SCHEMA_VERSION and answer["ok"] is False and answer["exit_code"] == 1
    assert answer["error"]["type"] == "ExportFailedError" and "return_indices=True" in answer["error"]["message"]


CLI_USER_ERRORS = {  # name: (model file source or None for squeezenet, extra arguments, what stderr must say)
    "wrong input shape": (None, ["--input-shape", "1,5,64,64"], "ExampleInputError"),
    "factory raises": ("def build():\n    raise RuntimeError('no weights here')\n", [], "build() raised RuntimeError"),
    "file fails on import": ("import not_a_module_anywhere\n", [], "raised ModuleNotFoundError on import"),
    "callable needs arguments": ("def build(width):\n    pass\n", [], "must build the model with no arguments"),
    "missing output folder": (None, ["-o", "/nonexistent/folder/m.onnx"], "does not exist; create it first"),
    "unsupported opset": (None, ["--exporter", "torchscript", "--opset", "99"], "the TorchScript exporter writes opsets 7 to 20"),
    "opset below dynamo's": (
        None,
        ["--opset", "11"],
        "UnsupportedOpsetError: opset_version=11: the dynamo exporter writes opsets 18",
    ),
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
    assert cli.main(["inspect", "torchvision:alexnet", "--input-shape", "1,3,64,64", "--device", "cuda"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


@pytest.mark.cuda
def test_cli_exports_on_cuda(tmp_path, capsys) -> None:
    out = tmp_path / "cuda.onnx"
    code = cli.main(["export", "torchvision:alexnet", "--input-shape", "1,3,160,160", "--device", "cuda", "-o", str(out)])
    assert code == 0 and out.exists() and "onnxruntime max abs error" in capsys.readouterr().out


def run_cli(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fxpool", *arguments], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_version_and_python_dash_m_fxpool() -> None:
    import fxpool

    run = run_cli("--version")
    assert run.returncode == 0 and run.stdout.strip() == f"fxpool {fxpool.__version__}"


def test_help_is_plain_text_and_imports_no_torch() -> None:
    script = (
        "import sys\nfrom fxpool import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "print(sorted(m for m in ('torch', 'onnx', 'numpy') if m in sys.modules))"
    )
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("[]"), run.stdout  # no heavy module loaded to print the help
    assert "``" not in run.stdout and ":func:" not in run.stdout and ":class:" not in run.stdout
    assert "exit status:" in run.stdout and "usage: fxpool" in run.stdout
    assert elapsed < 2.0, f"fxpool --help took {elapsed:.2f} s"


@pytest.mark.parametrize("command", ["inspect", "export"])
def test_each_command_has_plain_help(command: str) -> None:
    run = run_cli(command, "--help")
    assert run.returncode == 0 and "--input-shape" in run.stdout and "``" not in run.stdout


def test_usage_errors_exit_2_with_usage_and_json_when_asked() -> None:
    run = run_cli("inspect", "torchvision:alexnet", "--json")  # --input-shape missing
    assert run.returncode == 2
    assert run.stderr.startswith("usage: fxpool explain") and "required: --input-shape" in run.stderr
    answer = json.loads(run.stdout)
    assert answer["ok"] is False and answer["exit_code"] == 2 and answer["error"]["type"] == "UsageError"
    assert run_cli("no-such-command").returncode == 2
    assert run_cli("inspect", "no-colon", "--input-shape", "1,3,8,8").returncode == 2


def test_inspect_strict_exits_1_where_a_pool_is_left_and_says_so_in_json() -> None:
    model = f"{EXPORT_TESTS}:IndicesHead"  # its max pool returns indices: left under --dynamic-hw
    plain = run_cli("inspect", model, "--input-shape", "1,3,10,10", "--dynamic-hw")
    assert plain.returncode == 0 and "return_indices=True" in plain.stdout
    strict = run_cli("inspect", model, "--input-shape", "1,3,10,10", "--dynamic-hw", "--strict", "--json")
    assert strict.returncode == 1, strict.stderr
    answer = json.loads(strict.stdout)
    assert answer["schema_version"] == cli_module.JSON_SCHEMA_VERSION and answer["command"] == "inspect"
    assert answer["ok"] is False and answer["error"]["type"] == "UnconvertedPoolError"
    assert answer["report"]["records"], answer
    assert "UnconvertedPoolError" in strict.stderr


def test_export_json_on_success_has_the_schema_version(tmp_path) -> None:
    run = run_cli("export", "torchvision:squeezenet1_1", "--input-shape", "1,3,64,64", "-o", str(tmp_path / "s.onnx"), "--json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["schema_version"] == cli_module.JSON_SCHEMA_VERSION and answer["ok"] is True and answer["error"] is None
    assert answer["path"].endswith("s.onnx") and answer["max_abs_error"] < 1e-4 and answer["report"]["records"]


def test_opset_11_with_torchscript_writes_opset_11(tmp_path) -> None:
    out = tmp_path / "a.onnx"
    run = run_cli(
        "export",
        "torchvision:squeezenet1_1",
        "--input-shape",
        "1,3,64,64",
        "-o",
        str(out),
        "--exporter",
        "torchscript",
        "--opset",
        "11",
    )
    assert run.returncode == 0, run.stderr
    assert [o.version for o in onnx.load(str(out)).opset_import if o.domain in ("", "ai.onnx")] == [11]


def test_a_missing_extra_is_a_usage_error_naming_the_pip_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if fxpool[onnx] were not installed
    code = cli.main(["export", "torchvision:squeezenet1_1", "--input-shape", "1,3,64,64", "-o", str(tmp_path / "m.onnx"), "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert "pip install onnx onnxruntime onnxscript" in captured.err and "MissingDependencyError" in captured.err
    assert json.loads(captured.out)["error"]["type"] == "MissingDependencyError"


def test_zoo_outside_a_checkout_says_how_to_get_it(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_module.importlib.util, "find_spec", lambda name: None)
    assert not cli_module.zoo_available()
    assert cli.main(["zoo", "--models", "alexnet"]) == 2
    assert "ships with fxpool's source" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "zoo" not in capsys.readouterr().out  # not offered where it cannot run


def test_a_pt2_export_checks_the_opset_and_the_extra_as_fxpool_export_does(tmp_path, monkeypatch, capsys) -> None:
    import torch
    from torch import nn

    converting = importlib.import_module("fxpool.convert")  # the module (fxpool.convert is the function)
    path = tmp_path / "model.pt2"
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((5, 7))).eval()
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 17, 19),)), path)
    monkeypatch.setattr(converting, "convert", lambda *a, **k: pytest.fail("converted before the checks"))
    assert cli.main(["export", str(path), "-o", str(tmp_path / "m.onnx"), "--opset", "11"]) == 2
    assert "UnsupportedOpsetError: opset_version=11: the dynamo exporter writes opsets 18" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    assert cli.main(["export", str(path), "-o", str(tmp_path / "m.onnx")]) == 2
    assert "pip install onnx onnxruntime onnxscript" in capsys.readouterr().err


def test_a_pickled_model_file_runs_no_code_and_the_refusal_names_the_opt_in(tmp_path) -> None:
    from test_loading import evil_pt

    path, marker = evil_pt(tmp_path)
    for extra in ((), ("--strict", "--json")):
        run = run_cli("explain", str(path), "--input-shape", "1,3,13,11", *extra)
        assert run.returncode == 2 and "--trust-model-file" in run.stderr, run.stderr
        assert not marker.exists()
    assert json.loads(run.stdout)["error"]["type"] == "UntrustedModelFileError"
    assert "--trust-model-file" in run_cli("export", "--help").stdout


@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_an_output_that_cannot_be_written_is_exit_2_before_the_model_is_built(where: str, tmp_path) -> None:
    output = tmp_path if where == "folder" else tmp_path / "no" / "m.onnx"
    # a model spec that would fail to build: the output is refused first
    run = run_cli("export", "no_such_module_here:build", "--input-shape", "1,3,8,8", "-o", str(output))
    assert run.returncode == 2 and "OutputFileError" in run.stderr and str(output) in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []


def test_export_names_every_file_it_wrote_with_its_size(tmp_path) -> None:
    out = tmp_path / "m.onnx"
    run = run_cli("export", "torchvision:alexnet", "--input-shape", "1,3,96,96", "-o", str(out), "--json")
    assert run.returncode == 0, run.stderr
    files = json.loads(run.stdout)["files"]
    assert [Path(f["path"]).name for f in files] == ["m.onnx.data", "m.onnx"]
    assert all(f["size"] == Path(f["path"]).stat().st_size for f in files)
    run = run_cli("export", "torchvision:alexnet", "--input-shape", "1,3,96,96", "-o", str(tmp_path / "one.onnx"), "--single-file")
    assert run.returncode == 0, run.stderr
    assert f"wrote {tmp_path / 'one.onnx'} (" in run.stdout and "one.onnx.data" not in run.stdout
    assert "model: torchvision:alexnet (weights: random" in run.stdout


def test_the_console_script_finds_a_module_of_the_current_folder(tmp_path) -> None:
    script = Path(sys.executable).with_name("fxpool")
    if not script.is_file():
        pytest.skip("no fxpool console script beside this Python")
    (tmp_path / "mymodels.py").write_text("import torch\ndef build():\n    return torch.nn.AdaptiveAvgPool2d(3)\n")
    run = subprocess.run(
        [str(script), "explain", "mymodels:build", "--input-shape", "1,2,7,7"], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0 and "AdaptiveAvgPool2d" in run.stdout, run.stderr
    run = subprocess.run(
        [str(script), "explain", "othermodels:build", "--input-shape", "1,2,7,7"], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 2 and "othermodels.py:build" in run.stderr, run.stderr
