"""The ``fxpool`` command line (``fxpool ...``, ``python -m fxpool ...``); its exit statuses are in `EPILOG`.

Nothing heavy is imported before the arguments are parsed: ``fxpool --help`` answers without loading torch. ``--json``
prints one JSON object on stdout whatever the outcome, ``schema_version`` first."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .modelspecs import spec_forms, spec_table

JSON_SCHEMA_VERSION = 1  # raised when a key of the --json object changes meaning or goes away
EXIT_OK, EXIT_MODEL_FAILED, EXIT_USAGE = 0, 1, 2
DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")
MODEL_HELP = spec_forms(with_notes=True)
DESCRIPTION = f"""\
Exact, export-friendly replacements for adaptive pooling in PyTorch models.

MODEL names the model, and says what may run to build it:
{spec_table()}"""

EPILOG = """\
exit status:
  0  success
  1  the model failed: a pool left under --strict, an export the exporter
     refused, a graph that failed verification
  2  usage: bad arguments, a MODEL that names nothing or a file not trusted,
     an input shape the model rejects, a missing optional dependency, an opset
     the exporter does not write, an output path that cannot be written

Run 'fxpool COMMAND --help' for a command's options."""

ZOO_ELSEWHERE = (
    "fxpool zoo: the model-zoo sweep (model_zoo_checks/) ships with fxpool's source (the repository and its sdist), "
    "not with the installed wheel. Run `make zoo` (or `fxpool zoo ...`) from the root of the source tree; "
    "`fxpool explain` and `fxpool export` work anywhere."
)


class UsageError(Exception):
    """A command line argparse or fxpool cannot act on (exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, raising `UsageError` instead of exiting, so ``--json`` can answer too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--input-shape wants comma-separated integers like 1,3,224,224, got {text!r}") from None
    if not shape or any(s < 0 for s in shape):
        raise argparse.ArgumentTypeError(f"--input-shape wants non-negative sizes, got {text!r}")
    return shape


def zoo_available() -> bool:
    """Whether ``model_zoo_checks`` can be imported: installed beside fxpool, or the current folder is a checkout."""
    if importlib.util.find_spec("model_zoo_checks") is not None:
        return True
    checkout = Path.cwd()
    if (checkout / "model_zoo_checks" / "zoo.py").is_file() and (checkout / "fxpool" / "cli.py").is_file():
        sys.path.insert(0, str(checkout))
        return True
    return False


def build_parser(with_zoo: bool, program: bool = False) -> argparse.ArgumentParser:
    """The parser; ``zoo`` only where the sweep can run; ``--input-shape`` optional for a ``.pt2`` MODEL (``program``)."""
    parser = _Parser(prog="fxpool", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    import fxpool  # the package alone: its names load on first use

    parser.add_argument("--version", action="version", version=f"fxpool {fxpool.__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of fxpool's errors too (the exit status is the same)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    explain = commands.add_parser(
        "explain", aliases=["inspect"], help="print the conversion report without exporting (alias: inspect)"
    )
    export = commands.add_parser("export", help="convert and export to ONNX, verified with onnxruntime")
    for sub in (explain, export):
        sub.add_argument("model", metavar="MODEL", help=MODEL_HELP)
        sub.add_argument(
            "--input-shape", type=parse_shape, required=not program, help="e.g. 1,3,320,320 (a .pt2 program has its own)"
        )
        sub.add_argument("--dynamic-hw", action="store_true", help="one graph exact at every spatial size")
        sub.add_argument("--strict", action="store_true", help="fail (exit 1) if any pool would be left to PyTorch")
        sub.add_argument("--json", action="store_true", help="print one JSON object on stdout, on failure too")
        sub.add_argument("--device", default="cpu", help="where the model and its example run: cpu, cuda, cuda:1 (default cpu)")
        sub.add_argument(
            "--dtype", choices=DTYPE_NAMES, default="float32", help="the model's and the example's dtype (default float32)"
        )
        sub.add_argument("--weights", help="torchvision:NAME only: the weights to load, e.g. DEFAULT (default: random)")
        sub.add_argument(
            "--pretrained",
            action="store_true",
            help="timm:NAME and hf:ID only: pretrained weights from the local cache (random, and said, where there are none)",
        )
        sub.add_argument(
            "--trust-model-file",
            action="store_true",
            help="let a FILE.pt (or a .pt2 whose pickles need it) run code from the file while it loads: only for files "
            "you trust as you trust code you run",
        )
    export.add_argument("-o", "--output", required=True, help="the .onnx file to write (checked before any work)")
    export.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo", help="default dynamo")
    export.add_argument(
        "--opset", type=int, help="ONNX opset version: dynamo writes 18 and up, torchscript 7 to 20; others are refused"
    )
    export.add_argument("--dynamic-batch", action="store_true", help="make axis 0 of the input dynamic")
    export.add_argument(
        "--single-file",
        action="store_true",
        help="keep the weights inside the .onnx (dynamo writes them to OUTPUT.data beside it by default; up to 2 GB)",
    )
    export.add_argument("--no-verify", action="store_true", help="skip onnx.checker and onnxruntime")
    if with_zoo:
        zoo = commands.add_parser("zoo", help="run the model-zoo sweep of this checkout (model_zoo_checks)", add_help=False)
        zoo.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    want_json = "--json" in argv
    command = next((word for word in argv if not word.startswith("-")), "")
    if argv[:1] == ["zoo"]:  # everything after it is the sweep's (REMAINDER drops leading options)
        if not zoo_available():
            print(ZOO_ELSEWHERE, file=sys.stderr)
            return EXIT_USAGE
        from model_zoo_checks import zoo as zoo_module

        return int(zoo_module.main(argv[1:]) or 0)
    try:
        args = build_parser(with_zoo=zoo_available(), program=any(word.endswith(".pt2") for word in argv)).parse_args(argv)
    except UsageError as error:
        return _failed(want_json, command, error, EXIT_USAGE)
    try:
        return _run(args)
    except Exception as error:
        code = _exit_code(error)
        if code is None:  # not the user's to fix: a bug, shown with its traceback
            if want_json:
                _print_json(args.command, EXIT_MODEL_FAILED, error)
            raise
        if args.debug:
            traceback.print_exc()
        return _failed(want_json, args.command, error, code)


def _exit_code(error: BaseException) -> int | None:
    """2 for what the user can fix on the command line, 1 for a model that fails; None for anything else."""
    from .errors import ExampleInputError, ExportRequestError, FxpoolError, MissingDependencyError
    from .loading import ModelSpecError

    fixable = (UsageError, argparse.ArgumentTypeError, ModelSpecError, ExampleInputError, MissingDependencyError)
    if isinstance(error, (*fixable, ExportRequestError, OSError)):  # OSError: an output path that cannot be written
        return EXIT_USAGE
    return EXIT_MODEL_FAILED if isinstance(error, FxpoolError) else None


def _failed(want_json: bool, command: str, error: BaseException, code: int) -> int:
    print(error if isinstance(error, UsageError) else f"fxpool {command}: {type(error).__name__}: {error}", file=sys.stderr)
    if want_json:
        _print_json(command, code, error)
    return code


def _print_json(command: str, code: int, error: BaseException | None, **fields: Any) -> None:
    """The one JSON object of ``--json``: ``schema_version``, ``command``, ``ok``, ``exit_code``, ``error``, then ``fields``."""
    described = None if error is None else {"type": type(error).__name__, "message": str(error)}
    payload = {"schema_version": JSON_SCHEMA_VERSION, "command": command, "ok": code == EXIT_OK, "exit_code": code}
    print(json.dumps({**payload, "error": described, **fields}, indent=2))


def _device(text: str) -> Any:
    import torch

    try:
        device = torch.device(text)
    except RuntimeError as error:
        raise argparse.ArgumentTypeError(f"--device: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)")
    return device


def _run(args: argparse.Namespace) -> int:
    import torch

    from .convert import enforce_strict, explain
    from .errors import FxpoolError
    from .exporting import export
    from .loading import load_model
    from .writing import check_output_path

    if args.command == "export":
        check_output_path(args.output)  # before the model is built: a bad path costs nothing
    loaded = load_model(args.model, weights=args.weights, pretrained=args.pretrained, trust_file=args.trust_model_file)
    if "transformers" in sys.modules:  # its notices while the model runs are not the user's (the CLI owns the process)
        sys.modules["transformers"].logging.set_verbosity_error()
    model = loaded.model
    program = isinstance(model, torch.export.ExportedProgram)
    if program:
        _refuse_program_options(args)
        example = None if args.input_shape is None else torch.randn(args.input_shape)
    else:
        if args.input_shape is None:
            raise UsageError(f"fxpool {args.command}: --input-shape is required for {args.model} (only a .pt2 program has its own)")
        device, dtype = _device(args.device), getattr(torch, args.dtype)
        assert isinstance(model, torch.nn.Module)
        model = model.to(device=device, dtype=dtype)
        example = torch.randn(args.input_shape, device=device, dtype=dtype)
    heading = _wrapped(f"model: {args.model} (weights: {loaded.weights})")

    if args.command != "export":
        report = explain(model, example, dynamic=args.dynamic_hw)
        refused = None
        if args.strict:  # the FxpoolError strict=True would raise
            try:
                enforce_strict(report, for_export=False)
            except FxpoolError as error:
                refused = error
        code = EXIT_OK if refused is None else EXIT_MODEL_FAILED
        if args.json:
            _print_json(args.command, code, refused, weights=loaded.weights, report=report.to_dict())
        else:
            print(f"{heading}\n{report}")
        if refused is not None:
            print(f"fxpool {args.command}: {type(refused).__name__}: {refused}", file=sys.stderr)
        return code

    options: dict[str, Any] = {"dynamo": args.exporter == "dynamo"}
    if not program:
        options.update(input_names=["input"], output_names=["output"])
    if args.opset is not None:
        options["opset_version"] = args.opset
    if args.single_file and args.exporter == "dynamo":
        options["external_data"] = False
    if args.dynamic_batch or args.dynamic_hw:
        axes = ([0] if args.dynamic_batch else []) + (list(range(2, len(args.input_shape))) if args.dynamic_hw else [])
        if args.exporter == "dynamo":
            options["dynamic_shapes"] = ({a: torch.export.Dim.AUTO for a in axes},)
        else:
            options["dynamic_axes"] = {"input": {a: f"d{a}" for a in axes}}
    result = export(model, example, args.output, verify=not args.no_verify, dynamic=args.dynamic_hw, strict=args.strict, **options)
    if args.json:
        _print_json(
            "export",
            EXIT_OK,
            None,
            path=result.path,
            files=[{"path": f.path, "size": f.size} for f in result.files],
            weights=loaded.weights,
            ops=result.op_histogram,
            max_abs_error=result.max_abs_error,
            verified=result.verified,
            pool_nodes=result.pool_nodes,
            report=result.report.to_dict(),
        )
    else:
        wrote = "".join(f"\nwrote {written}" for written in result.files)
        ops = ", ".join(f"{op} {count}" for op, count in result.op_histogram.items())
        checked = f"onnxruntime max abs error: {result.max_abs_error}" + (f" ({result.verified})" if result.verified else "")
        print(f"{heading}\n{result.report}{wrote}\n{_wrapped('ops: ' + ops)}\n{_wrapped(checked)}")
    return EXIT_OK


def _wrapped(text: str) -> str:
    """``text`` within the report's 100 columns, continued lines indented."""
    import textwrap

    return textwrap.fill(text, width=100, subsequent_indent="  ", break_on_hyphens=False)


def _refuse_program_options(args: argparse.Namespace) -> None:
    """A ``.pt2`` program keeps its device, dtype and dynamic dimensions, and exports through the dynamo exporter."""
    given = {"--device": args.device != "cpu", "--dtype": args.dtype != "float32", "--dynamic-hw": args.dynamic_hw}
    if args.command == "export":
        given.update({"--dynamic-batch": args.dynamic_batch, "--exporter torchscript": args.exporter == "torchscript"})
    fixed = [flag for flag, on in given.items() if on]
    if fixed:
        raise UsageError(
            f"fxpool {args.command}: {', '.join(fixed)} cannot apply to a .pt2 program: it keeps the device, dtype and "
            f"dynamic dimensions it was exported with, and exports through the dynamo exporter"
        )


if __name__ == "__main__":
    sys.exit(main())
