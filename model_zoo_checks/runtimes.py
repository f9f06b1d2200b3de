"""The original model and fxpool's conversion on the runtimes users deploy to, side by side.

Per runtime and model: does the original convert, run, and how far is it from PyTorch; the same for
fxpool's conversion; the ops the runtime's program holds (and, for ExecuTorch, how many of them
XNNPACK took). Runtimes, each optional (absent ones are reported, not failed):

- ``executorch``: ``torch.export`` -> ``to_edge_transform_and_lower`` with the XNNPACK partitioner ->
  ``.pte``, run by ExecuTorch's Python runtime;
- ``litert``: ``litert_torch.convert`` -> ``.tflite``, run by its interpreter (ai-edge-litert);
- ``coreml``: ``coremltools.convert`` of the exported program to an ML program (the MIL ops); a
  prediction needs macOS, so it is not run here;
- ``openvino``: the ONNX graph (dynamo exporter; for the original, the stock exporter) compiled for CPU
  in float32;
- ``tensorrt``: the ONNX graph built into a TensorRT engine; CUDA only (``gpu_checks.sh``).

Dynamic sizes (``DYNAMIC_MODELS``, ExecuTorch): ``fxpool.convert(model, x, dynamic=True)``, then
``torch.export.export`` with a bounded ``Dim`` on each spatial axis, lowered once as above and run by
ExecuTorch's runtime at the example's size and three sizes it was never exported at, against eager.

Run ``python -m model_zoo_checks.runtimes`` (``make runtimes``); it writes ``REPORT/runtimes.json``,
``REPORT/runtimes.md`` and each case's third-party output under ``REPORT/logs/``.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

import fxpool

from .capture import captured, console
from .options import draw_figures, run_facts, without_machine_paths
from .tables import RUNTIME_NAMES

# Largest |runtime - PyTorch| allowed, relative to the output's largest magnitude (at least 1): float32
# runtimes reorder sums and fuse ops; max pooling alone is compared bit for bit.
TOLERANCE = 1e-4


class PyramidPooling(nn.Module):
    """A PSPNet-style pyramid: pools to 1, 2, 3 and 6, upsampled and concatenated."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stages = nn.ModuleList(nn.Sequential(nn.AdaptiveAvgPool2d(size), nn.Conv2d(channels, 2, 1)) for size in (1, 2, 3, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        return torch.cat(
            [x] + [nn.functional.interpolate(stage(x), size=size, mode="bilinear", align_corners=False) for stage in self.stages],
            dim=1,
        )


def _pooled(pool: nn.Module) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 1), pool)


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from fxpool.loading import build_torchvision

        return build_torchvision(name)

    return build


# name: (builder, input shape, what it shows)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], str]] = {
    "sliding 10->7": (lambda: _pooled(nn.AdaptiveAvgPool2d(7)), (1, 3, 10, 10), "sliding AvgPools"),
    "slices 33->6": (lambda: _pooled(nn.AdaptiveAvgPool2d(6)), (1, 3, 33, 33), "window slices"),
    "uniform 7->3": (lambda: _pooled(nn.AdaptiveAvgPool2d(3)), (1, 3, 7, 7), "AvgPool k=3 s=2"),
    "upsample 4x5->16x20": (lambda: _pooled(nn.AdaptiveAvgPool2d((16, 20))), (1, 3, 4, 5), "nearest upsample"),
    "mean 9->1": (lambda: _pooled(nn.AdaptiveAvgPool2d(1)), (1, 3, 9, 9), "mean"),
    "max gathered 10->7": (lambda: nn.Sequential(nn.AdaptiveMaxPool2d(7)), (1, 8, 10, 10), "gather + MaxPool"),
    "max 9->1": (lambda: nn.Sequential(nn.AdaptiveMaxPool2d(1)), (1, 8, 9, 9), "amax"),
    "psp pyramid 40": (lambda: PyramidPooling(), (1, 8, 40, 40), "pools to 1, 2, 3, 6 of 40x40"),
    "3d 7x10x10->3x5x5": (
        lambda: nn.Sequential(nn.AdaptiveAvgPool3d((3, 5, 5))),  # no Conv3d: ExecuTorch's portable conv is 2d only
        (1, 8, 7, 10, 10),
        "AvgPool3d k=(3,2,2) s=(2,2,2); two 2d pools under torch.export",
    ),
    "alexnet@160": (_torchvision("alexnet"), (1, 3, 160, 160), "4x4 -> 6x6"),
    "vgg11@320": (_torchvision("vgg11"), (1, 3, 320, 320), "10x10 -> 7x7"),
}
DEFAULT_MODELS = tuple(MODELS)


def _pvt_v2() -> nn.Module:
    import timm

    # linear attention pools each stage's keys to 7x7 (40, 20, 10 and 5 at 160): a non-global pool
    return timm.create_model("pvt_v2_b0", pretrained=False, linear=True, num_classes=10, depths=(1, 1, 1, 1))


# name: (builder, example shape, three spatial sizes the program is not exported at, Dim bounds, what it shows).
# The bounds keep every feature map at 2 or more: where a conv's output may be 1, torch.export refuses the
# Dims for the original model too ("generated guard ... != 1"; alexnet below 96).
DYNAMIC_MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], list[tuple[int, ...]], tuple[int, int], str]] = {
    "alexnet dynamic": (_torchvision("alexnet"), (1, 3, 160, 160), [(128, 128), (224, 224), (200, 256)], (96, 320), "->6x6"),
    "pvt_v2 dynamic": (_pvt_v2, (1, 3, 160, 160), [(128, 128), (192, 160), (224, 224)], (64, 320), "timm, 4 pools ->7x7"),
    "psp pyramid dynamic": (PyramidPooling, (1, 8, 40, 40), [(33, 33), (64, 48), (97, 80)], (16, 256), "->1, 2, 3, 6"),
    "max dynamic 10->7": (
        lambda: nn.Sequential(nn.AdaptiveMaxPool2d(7)),
        (1, 8, 10, 10),
        [(13, 11), (20, 20), (5, 7)],
        (4, 64),
        "max",
    ),
    "3d dynamic 7x10x10->3x5x5": (
        lambda: nn.Sequential(nn.AdaptiveAvgPool3d((3, 5, 5))),
        (1, 8, 7, 10, 10),
        [(5, 12, 9), (9, 10, 16), (4, 4, 6)],
        (3, 32),
        "3d",
    ),
}


@dataclass(frozen=True)
class RuntimeRun:
    """One model form on one runtime."""

    converted: bool
    ran: bool | None  # None: not run here (Core ML off macOS)
    max_error: float | None = None
    bound: float | None = None
    ops: dict[str, int] = field(default_factory=dict)
    delegated: str | None = None  # e.g. "3/3 ops in XNNPACK"
    reason: str | None = None  # why it did not convert or run, one line
    seconds: float = 0.0

    @property
    def exact(self) -> bool | None:
        if self.max_error is None or self.bound is None:
            return None
        return self.max_error <= self.bound


@dataclass(frozen=True)
class Row:
    runtime: str
    model: str
    original: RuntimeRun
    fxpool: RuntimeRun


# Dynamic cases also run by the program route: torch.export with Dims first, then fxpool.convert(program).
PROGRAM_ROUTE = ("psp pyramid dynamic", "alexnet dynamic")

# Dynamic cases XNNPACK does not lower, with why; they run on ExecuTorch's portable kernels instead. None since
# the dynamic max form reduces its entries by elementwise maxima (executorch 1.5.1 refused its max.dim without
# keepdim before).
XNNPACK_REFUSES: dict[str, str] = {}


@dataclass(frozen=True)
class DynamicRow:
    """A ``dynamic=True`` conversion exported once with Dims, on one runtime at several sizes."""

    runtime: str  # "executorch" (XNNPACK and portable kernels) or "executorch-portable"
    model: str
    lowered: RuntimeRun  # the export and lowering: its ops, or why it failed (``ran`` is None)
    runs: tuple[tuple[tuple[int, ...], RuntimeRun], ...] = ()  # (spatial size, its run), the example's first
    route: str = "module"  # "module": convert(model, x, dynamic=True), then export; "program": export, then convert

    @property
    def exact(self) -> bool:
        return self.lowered.converted and bool(self.runs) and all(run.ran and run.exact for _, run in self.runs)


def _first_line(error: BaseException) -> str:
    """The error's first line, uncoloured, without this machine's paths (the report is published)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()  # exporters colour their messages
    return without_machine_paths(f"{type(error).__name__}: {text[0][:240] if text else ''}")


def _error(ours: torch.Tensor, expected: torch.Tensor, exact: bool) -> tuple[float, float]:
    error = (ours.float() - expected.float()).abs().max().item() if ours.numel() else 0.0
    bound = 0.0 if exact else TOLERANCE * max(1.0, expected.abs().max().item())
    return error, bound


# --- runtimes: each takes (model, example, workdir) and returns (output or None, ops, delegated) ---


def _lower_executorch(program: torch.export.ExportedProgram, workdir: Path, xnnpack: bool = True) -> tuple[bytes, Counter, str]:
    """``program`` lowered with the XNNPACK partitioner (or ExecuTorch's portable kernels alone) and written
    to ``model.pte``: the program's bytes (the runtime reads them in place: keep them while a method loaded
    from them runs), the ops of the lowered program and what XNNPACK took."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()] if xnnpack else [])
    ops: Counter = Counter()
    for node in lowered.exported_program().graph.nodes:
        if node.op == "call_function" and "getitem" not in str(node.target):
            ops[getattr(node.target, "__name__", str(node.target)).split(".")[0]] += 1
    calls = ops["executorch_call_delegate"]
    delegated = f"{calls} delegate call(s), {sum(ops.values()) - calls} op(s) outside XNNPACK" if xnnpack else "portable kernels"
    buffer = lowered.to_executorch().buffer
    (workdir / "model.pte").write_bytes(buffer)
    return buffer, ops, delegated


def _executorch(model: nn.Module, x: torch.Tensor, workdir: Path) -> tuple[torch.Tensor | None, Counter, str | None]:
    from executorch.runtime import Runtime

    buffer, ops, delegated = _lower_executorch(torch.export.export(model, (x,)), workdir)
    return Runtime.get().load_program(buffer).load_method("forward").execute([x])[0], ops, delegated


def _litert(model: nn.Module, x: torch.Tensor, workdir: Path) -> tuple[torch.Tensor | None, Counter, str | None]:
    import litert_torch
    from ai_edge_litert.interpreter import Interpreter

    path = workdir / "model.tflite"
    litert_torch.convert(model, (x,)).export(str(path))
    interpreter = Interpreter(model_path=str(path))
    ops = Counter(detail["op_name"] for detail in interpreter._get_ops_details())
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x.numpy())
    interpreter.invoke()
    return torch.from_numpy(interpreter.get_tensor(interpreter.get_output_details()[0]["index"])), ops, None


def _coreml(model: nn.Module, x: torch.Tensor, workdir: Path) -> tuple[torch.Tensor | None, Counter, str | None]:
    import coremltools

    program = torch.export.export(model, (x,)).run_decompositions({})
    converted = coremltools.convert(program, convert_to="mlprogram", minimum_deployment_target=coremltools.target.iOS17)
    ops = Counter(op.op_type for op in converted._mil_program.functions["main"].operations if op.op_type != "const")
    return None, ops, None  # prediction needs macOS


def _onnx(model: nn.Module, x: torch.Tensor, workdir: Path, ours: bool) -> Path:
    path = workdir / "model.onnx"
    if ours:
        fxpool.export(model, x, path, dynamo=True, verify=False)
    else:
        torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False)
    return path


def _openvino(model: nn.Module, x: torch.Tensor, workdir: Path, ours: bool) -> tuple[torch.Tensor | None, Counter, str | None]:
    import onnx
    import openvino

    path = _onnx(model, x, workdir, ours)
    ops = Counter(node.op_type for node in onnx.load(str(path)).graph.node if node.op_type != "Constant")
    compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return torch.from_numpy(compiled([x.numpy()])[compiled.output(0)]), ops, None


def _tensorrt(model: nn.Module, x: torch.Tensor, workdir: Path, ours: bool) -> tuple[torch.Tensor | None, Counter, str | None]:
    import onnx
    import tensorrt

    if not torch.cuda.is_available():
        raise RuntimeError("TensorRT needs a CUDA device")
    path = _onnx(model, x, workdir, ours)
    ops = Counter(node.op_type for node in onnx.load(str(path)).graph.node if node.op_type != "Constant")
    logger = tensorrt.Logger(tensorrt.Logger.WARNING)
    builder = tensorrt.Builder(logger)
    network = builder.create_network(0)
    parser = tensorrt.OnnxParser(network, logger)
    if not parser.parse(path.read_bytes()):
        raise RuntimeError("; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
    config = builder.create_builder_config()  # float32: no FP16/TF32 flags
    config.clear_flag(tensorrt.BuilderFlag.TF32)
    engine = tensorrt.Runtime(logger).deserialize_cuda_engine(builder.build_serialized_network(network, config))
    context = engine.create_execution_context()
    inputs = x.cuda().contiguous()
    output = torch.empty(tuple(engine.get_tensor_shape(engine.get_tensor_name(1))), device="cuda")
    context.set_tensor_address(engine.get_tensor_name(0), inputs.data_ptr())
    context.set_tensor_address(engine.get_tensor_name(1), output.data_ptr())
    context.execute_async_v3(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return output.cpu(), ops, None


RUNTIMES: dict[str, tuple[str, Callable[..., tuple[torch.Tensor | None, Counter, str | None]], bool]] = {
    # name: (module that must import, runner, whether the runner takes ``ours``)
    "executorch": ("executorch.runtime", _executorch, False),
    "litert": ("litert_torch", _litert, False),
    "coreml": ("coremltools", _coreml, False),
    "openvino": ("openvino", _openvino, True),
    "tensorrt": ("tensorrt", _tensorrt, True),
}


# The line that installs each runtime (make .venv-runtimes/.installed installs the first three and NNCF).
INSTALL = {
    "executorch": 'pip install "fxpool[executorch]"',
    "litert": 'pip install "fxpool[litert]"',
    "coreml": 'pip install "fxpool[coreml]"',
    "openvino": 'pip install "fxpool[crosscheck]"',
    "tensorrt": "pip install tensorrt, on a CUDA machine",
}


def available(runtime: str) -> str | None:
    """None if ``runtime`` can run here, else why not, with the line that installs it."""
    import importlib

    try:
        importlib.import_module(RUNTIMES[runtime][0])
    except Exception as error:  # ImportError, or a broken install
        return f"not installed ({_first_line(error)}): {INSTALL[runtime]}"
    if runtime == "tensorrt" and not torch.cuda.is_available():
        return "needs a CUDA device"
    return None


def run_form(runtime: str, model: nn.Module, x: torch.Tensor, ours: bool, exact: bool) -> RuntimeRun:
    """Convert and run one form (the original, or fxpool's conversion when ``ours``) on ``runtime``."""
    _, runner, takes_ours = RUNTIMES[runtime]
    with torch.no_grad():
        expected = model(x)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            args = (model, x, Path(workdir), ours) if takes_ours else (model, x, Path(workdir))
            output, ops, delegated = runner(*args)
        except Exception as error:
            return RuntimeRun(False, False, reason=_first_line(error), seconds=time.perf_counter() - start)
    if output is None:
        return RuntimeRun(
            True, None, ops=dict(ops), delegated=delegated, reason="prediction needs macOS", seconds=time.perf_counter() - start
        )
    error, bound = _error(output, expected, exact)
    return RuntimeRun(True, True, error, bound, dict(ops), delegated, seconds=time.perf_counter() - start)


def check(runtime: str, name: str, log: Path) -> Row:
    builder, shape, _ = MODELS[name]
    torch.manual_seed(0)
    model = builder().eval()
    x = torch.randn(shape)
    exact = name.startswith("max")  # max pooling alone: nothing else may round
    with captured(log):
        original = run_form(runtime, model, x, ours=False, exact=exact)
        try:
            converted = fxpool.convert(model, x).eval()
        except Exception as error:
            return Row(runtime, name, original, RuntimeRun(False, False, reason=f"fxpool.convert: {_first_line(error)}"))
        if runtime in ("openvino", "tensorrt"):  # fxpool.export converts itself
            ours = run_form(runtime, model, x, ours=True, exact=exact)
        else:
            ours = run_form(runtime, converted, x, ours=False, exact=exact)
    return Row(runtime, name, original, ours)


def check_dynamic(name: str, log: Path, xnnpack: bool = True, route: str = "module") -> DynamicRow:
    """``DYNAMIC_MODELS[name]`` converted with ``dynamic=True``, exported once with a bounded ``Dim`` per
    spatial axis (``route="program"``: the original exported with them, then ``fxpool.convert`` of the
    program, which keeps them), lowered for ExecuTorch (XNNPACK where ``xnnpack``, else the portable kernels
    alone), and run at the example's size and three others."""
    from executorch.runtime import Runtime
    from torch.export import Dim

    builder, shape, sizes, (low, high), _ = DYNAMIC_MODELS[name]
    torch.manual_seed(0)
    model = builder().eval()
    x = torch.randn(shape)
    exact = name.startswith("max")  # max pooling alone: nothing else may round
    runtime = "executorch" if xnnpack else "executorch-portable"
    start = time.perf_counter()
    with captured(log), tempfile.TemporaryDirectory() as workdir:
        try:
            dims = {axis: Dim(f"s{axis}", min=low, max=high) for axis in range(2, x.dim())}
            if route == "program":
                program = fxpool.convert(torch.export.export(model, (x,), dynamic_shapes=(dims,)))
            else:
                converted = fxpool.convert(model, x, dynamic=True).eval()
                program = torch.export.export(converted, (x,), dynamic_shapes=(dims,))
            buffer, ops, delegated = _lower_executorch(program, Path(workdir), xnnpack)
            loaded = Runtime.get().load_program(buffer)
            method = loaded.load_method("forward")
        except Exception as error:
            failed = RuntimeRun(False, False, reason=_first_line(error), seconds=time.perf_counter() - start)
            return DynamicRow(runtime, name, failed, route=route)
        lowered = RuntimeRun(True, None, ops=dict(ops), delegated=delegated, seconds=time.perf_counter() - start)
        runs = []
        for size in [tuple(shape[2:]), *sizes]:
            y = torch.randn(*shape[:2], *size)
            with torch.no_grad():
                expected = model(y)
            try:
                output = method.execute([y])[0]
            except Exception as error:
                runs.append((size, RuntimeRun(True, False, reason=_first_line(error))))
                continue
            error, bound = _error(output, expected, exact) if output.shape == expected.shape else (float("inf"), 0.0)
            runs.append((size, RuntimeRun(True, True, error, bound)))
    return DynamicRow(runtime, name, lowered, tuple(runs), route)


def dynamic_markdown(rows: Sequence[DynamicRow]) -> str:
    """One row per model: the lowered program, then the error at each size."""
    lines = ["| model | kernels | program | sizes: max error |", "|---|---|---|---|"]
    for row in rows:
        kernels = "XNNPACK, portable" if row.runtime == "executorch" else "portable"
        model = f"{row.model} (program route)" if row.route == "program" else row.model
        if not row.lowered.converted:
            lines.append(f"| {model} | {kernels} | {_run_cell(row.lowered, True)} | |")
            continue
        cells = []
        for size, run in row.runs:
            where = "x".join(map(str, size))
            cells.append(f"{where}: {_run_cell(run).removeprefix('runs, ')}" if run.ran else f"{where}: fails, `{run.reason}`")
        lines.append(f"| {model} | {kernels} | {_ops_cell(row.lowered)} | {'; '.join(cells)} |")
    return "\n".join(lines) + "\n"


_NOTABLE = (
    "GATHER_ND",
    "GatherND",
    "gather_nd",
    "Where",
    "SELECT",
    "select",
    "aten__adaptive_avg_pool2d",
    "aten_adaptive_max_pool2d",
    "_adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "ScatterND",
)


def _ops_cell(run: RuntimeRun) -> str:
    if not run.ops:
        return ""
    notable = [f"{op} x{n}" for op, n in sorted(run.ops.items()) if any(k in op for k in _NOTABLE)]
    total = sum(run.ops.values())
    text = f"{total} ops" + (f" ({', '.join(notable)})" if notable else "")
    return text + (f"; {run.delegated}" if run.delegated else "")


def _run_cell(run: RuntimeRun, code: bool = False) -> str:
    """What happened, in words; ``code``: the converter's reason as Markdown code (the docs' tables let a
    long op name or address in code break anywhere)."""
    if not run.converted:
        reason = "`" + str(run.reason).replace("`", "'") + "`" if code else run.reason
        return f"does not convert: {reason}"
    if run.ran is None:
        return f"converts; {run.reason}"
    verdict = "exact" if run.exact else "OFF"
    return f"runs, error {run.max_error:.1e} ({verdict})"


def markdown(rows: Sequence[Row], by_runtime: bool = False) -> str:
    """One table of every row; ``by_runtime``: a table per runtime under its heading, without the runtime column."""
    if by_runtime:
        runtimes = dict.fromkeys(row.runtime for row in rows)
        return "\n".join(
            f"### {RUNTIME_NAMES.get(r, r)}\n\n" + _rows_table([row for row in rows if row.runtime == r], False) for r in runtimes
        )
    return _rows_table(rows, True)


def _rows_table(rows: Sequence[Row], with_runtime: bool) -> str:
    first = ["runtime"] if with_runtime else []
    header = [*first, "model", "original", "original's program", "fxpool", "fxpool's program"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row.runtime] if with_runtime else []
        cells += [
            row.model,
            _run_cell(row.original, True),
            _ops_cell(row.original),
            _run_cell(row.fxpool, True),
            _ops_cell(row.fxpool),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.runtimes", description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", nargs="*", choices=list(RUNTIMES), default=list(RUNTIMES))
    parser.add_argument("--models", nargs="*", choices=list(MODELS), default=list(DEFAULT_MODELS))
    parser.add_argument(
        "--dynamic-models", nargs="*", choices=list(DYNAMIC_MODELS), default=list(DYNAMIC_MODELS), help="with ExecuTorch"
    )
    parser.add_argument("--report", default="reports/runtimes")
    args = parser.parse_args(argv)
    report = Path(args.report)
    out = console()
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    for runtime in args.runtimes:
        with captured(report / "logs" / f"{runtime}-import.log"):  # import-time warnings (coremltools, JAX)
            why_not = available(runtime)
        if why_not:
            skipped[runtime] = why_not
            print(f"{runtime}: skipped, {why_not}", file=out, flush=True)
            continue
        for name in args.models:
            row = check(runtime, name, report / "logs" / f"{runtime}-{name.replace(' ', '_').replace('>', '')}.log")
            rows.append(row)
            print(
                f"{runtime:10s} {name:22s} original: {_run_cell(row.original)[:70]:70s} fxpool: {_run_cell(row.fxpool)}",
                file=out,
                flush=True,
            )
    dynamic: list[DynamicRow] = []
    if "executorch" in args.runtimes and "executorch" not in skipped:
        for name in args.dynamic_models:
            for xnnpack in (True, False) if name in XNNPACK_REFUSES else (True,):
                log = report / "logs" / f"executorch-{'' if xnnpack else 'portable-'}{name.replace(' ', '_').replace('>', '')}.log"
                row = check_dynamic(name, log, xnnpack)
                dynamic.append(row)
                cells = [f"{'x'.join(map(str, size))}: {_run_cell(run)}" for size, run in row.runs]
                print(f"{row.runtime:19s} {name:26s} {'; '.join(cells) or _run_cell(row.lowered)}", file=out, flush=True)
            if name in PROGRAM_ROUTE:
                dynamic.append(
                    check_dynamic(name, report / "logs" / f"executorch-program-{name.replace(' ', '_')}.log", route="program")
                )
                cells = [f"{'x'.join(map(str, size))}: {_run_cell(run)}" for size, run in dynamic[-1].runs]
                print(f"{'executorch':19s} {name + ' (program)':26s} {'; '.join(cells)}", file=out, flush=True)
    report.mkdir(parents=True, exist_ok=True)
    results = {
        "torch": torch.__version__,
        **run_facts(),
        "skipped": skipped,
        "rows": [asdict(r) for r in rows],
        "dynamic": [asdict(r) for r in dynamic],
    }
    (report / "runtimes.json").write_text(json.dumps(results, indent=2))
    draw_figures("runtimes", results, report / "runtimes.json", out)
    text = markdown(rows) + "".join(f"\n{r}: skipped, {why}\n" for r, why in skipped.items())
    if dynamic:
        text += "\n### ExecuTorch, dynamic sizes\n\n" + dynamic_markdown(dynamic)
    (report / "runtimes.md").write_text(text)
    failed = [r for r in rows if not (r.fxpool.converted and r.fxpool.ran is not False and r.fxpool.exact is not False)]
    print(
        f"\n{len(rows)} runtime x model cases, fxpool's conversion converts and runs exactly on "
        f"{len(rows) - len(failed)}; dynamic sizes on ExecuTorch: {sum(r.exact for r in dynamic)} of {len(dynamic)} exact at "
        f"every size ({', '.join(XNNPACK_REFUSES)}: XNNPACK refuses, see XNNPACK_REFUSES); report in {report}",
        file=out,
        flush=True,
    )
    refused = [r for r in dynamic if not r.exact and not (r.runtime == "executorch" and r.model in XNNPACK_REFUSES)]
    return 1 if failed or refused else 0


if __name__ == "__main__":
    raise SystemExit(main())
