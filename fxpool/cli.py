"""The ``fxpool`` command line: ``export``, ``inspect`` and ``zoo``.

MODEL is ``torchvision:NAME`` (built with ``weights=None``), ``package.module:callable`` or
``path/to/file.py:callable``; the callable returns an ``nn.Module``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .loading import ModelSpecError, load_model


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--input-shape wants comma-separated integers like 1,3,224,224, got {text!r}") from None
    if not shape or any(s < 0 for s in shape):
        raise argparse.ArgumentTypeError(f"--input-shape wants non-negative sizes, got {text!r}")
    return shape


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fxpool", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    inspect_command = commands.add_parser("inspect", help="print the conversion report without exporting")
    export = commands.add_parser("export", help="convert and export to ONNX, verified with onnxruntime")
    for sub in (inspect_command, export):
        sub.add_argument("model", help="torchvision:NAME, module:callable or file.py:callable")
        sub.add_argument("--input-shape", type=parse_shape, required=True, help="e.g. 1,3,320,320")
        sub.add_argument("--dynamic-hw", action="store_true", help="one graph exact at every spatial size")
        sub.add_argument("--strict", action="store_true", help="fail if any pool would be left to PyTorch")
        sub.add_argument("--json", action="store_true", help="print the report as JSON")
        sub.add_argument("--device", default="cpu", help="where the model and its example run: cpu, cuda, cuda:1 (default cpu)")
        sub.add_argument(
            "--dtype", choices=sorted(DTYPES), default="float32", help="the model's and the example's dtype (default float32)"
        )
    export.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    export.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo")
    export.add_argument("--opset", type=int, default=None, help="ONNX opset version")
    export.add_argument("--dynamic-batch", action="store_true", help="make axis 0 of the input dynamic")
    export.add_argument("--no-verify", action="store_true", help="skip onnx.checker and onnxruntime")
    export.add_argument(
        "--quantizable",
        action="store_true",
        help="averaging matrices as ONNX Einsum, which onnxruntime's quantizers leave in float as they do the native pools",
    )

    zoo = commands.add_parser("zoo", help="run the torchvision model-zoo sweep (model_zoo_checks)", add_help=False)
    zoo.add_argument("rest", nargs=argparse.REMAINDER)

    parser.add_argument("--debug", action="store_true", help="show the full traceback of fxpool's errors")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["zoo"]:  # everything after it is the sweep's (REMAINDER drops leading options)
        args = argparse.Namespace(command="zoo", rest=argv[1:])
    else:
        args = parser.parse_args(argv)
    if args.command == "zoo":
        try:
            from model_zoo_checks import zoo as zoo_module
        except ImportError:
            print(
                "fxpool zoo: the model-zoo sweep (model_zoo_checks/) ships with the source checkout, not with the "
                "installed package. Clone the repository and run `make zoo` there (or `python -m model_zoo_checks.zoo` "
                "from its root); `fxpool inspect` and `fxpool export` work anywhere.",
                file=sys.stderr,
            )
            return 2
        return zoo_module.main(args.rest)
    try:
        model = load_model(args.model)
    except ModelSpecError as error:
        parser.error(str(error))
    from fxpool.errors import FxpoolError

    if not isinstance(model, nn.Module):
        parser.error(f"{args.model}: a torch.export program; convert it with fxpool.convert(program) in Python")
    try:
        return _run(args, model)
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    except (FxpoolError, OSError) as error:  # the user's to fix: one message, no traceback
        if args.debug:
            raise
        print(f"fxpool {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def _device(text: str) -> torch.device:
    try:
        device = torch.device(text)
    except RuntimeError as error:
        raise argparse.ArgumentTypeError(f"--device: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)")
    return device


def _run(args: argparse.Namespace, model: nn.Module) -> int:
    device, dtype = _device(args.device), DTYPES[args.dtype]
    model = model.to(device=device, dtype=dtype)
    example = torch.randn(args.input_shape, device=device, dtype=dtype)
    import fxpool

    if args.command == "inspect":
        report = fxpool.explain(model, example, dynamic=args.dynamic_hw)
        print(json.dumps(report.to_dict(), indent=2) if args.json else report)
        if args.strict and report.unconverted:
            return 1
        return 0

    options: dict[str, Any] = {"dynamo": args.exporter == "dynamo", "input_names": ["input"], "output_names": ["output"]}
    if args.opset is not None:
        options["opset_version"] = args.opset
    if args.dynamic_batch or args.dynamic_hw:
        axes = ([0] if args.dynamic_batch else []) + (list(range(2, len(args.input_shape))) if args.dynamic_hw else [])
        if args.exporter == "dynamo":
            options["dynamic_shapes"] = ({a: torch.export.Dim.AUTO for a in axes},)
        else:
            options["dynamic_axes"] = {"input": {a: f"d{a}" for a in axes}}
    result = fxpool.export(
        model,
        example,
        args.output,
        verify=not args.no_verify,
        dynamic=args.dynamic_hw,
        strict=args.strict,
        quantizable=args.quantizable,
        **options,
    )
    summary = {
        "path": result.path,
        "ops": result.op_histogram,
        "max_abs_error": result.max_abs_error,
        "verified": result.verified,
        "pool_nodes": result.pool_nodes,
        "report": result.report.to_dict() if args.json else result.report.summary(),
    }
    print(
        json.dumps(summary, indent=2)
        if args.json
        else (
            f"{result.report}\nwrote {result.path}\nops: {result.op_histogram}\nonnxruntime max abs error: {result.max_abs_error}"
            + (f" ({result.verified})" if result.verified else "")
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
