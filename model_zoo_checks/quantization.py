"""How well fxpool's graphs quantize: the quantizers users run, on the original and on fxpool's conversion.

Every case is a float model prepared three ways — the original (its stock dynamo ONNX graph:
AveragePool, ReduceMean or the GatherND/Where decomposition; absent where it does not export), fxpool's
conversion (pools, slices, window sums and maxima, no averaging matrix) and the conversion with the pool kept in float
— then quantized four ways and compared with the float PyTorch model on four fixed test inputs: the
relative L2 error ``|quantized - torch| / |torch|``.

- ``dynamic``: ``onnxruntime.quantization.quantize_dynamic`` (int8 weights), run by onnxruntime;
- ``static QDQ``: ``quantize_static`` in QDQ format with eight calibration inputs, run by onnxruntime;
- ``NNCF``: OpenVINO's ``nncf.quantize`` of the ONNX graph (eight calibration inputs), run by OpenVINO
  on CPU in float32 inference precision;
- ``pt2e XNNPACK``: PyTorch 2 export quantization — ``torch.export``, ``prepare_pt2e`` with ExecuTorch's
  ``XNNPACKQuantizer`` (symmetric, per-channel), calibration, ``convert_pt2e`` — lowered to ExecuTorch
  with the XNNPACK partitioner and run by ExecuTorch's runtime.

"Pool in float" names the pool's nodes to the quantizer (``nodes_to_exclude`` and NNCF's
``ignored_scope``, from ``ExportResult.pool_nodes``; for pt2e the replacement module's type).
A quantizer that is not installed leaves its columns empty (NNCF and ExecuTorch come with
``make runtimes``' venv, where ``make bench`` runs).

The bound the conversion is held to (:func:`within_bounds`): at most 1.1 times the error of the
quantized original where the original quantizes and runs, else at most the error of the conversion
with its pool left in float.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import fxpool
from fxpool.replacements import ExactAdaptivePool
from fxpool.verifying import onnxruntime_session

from .capture import captured
from .catalog import build

# (name, builder, input shape): a convolution, then the pool (nothing after it to hide its error).
POOL_CASES: tuple[tuple[str, Callable[[], nn.Module], tuple[int, ...]], ...] = (
    ("12->6 (AvgPool)", lambda: _after_conv(nn.AdaptiveAvgPool2d(6)), (1, 3, 12, 12)),
    ("9->1 (mean)", lambda: _after_conv(nn.AdaptiveAvgPool2d(1)), (1, 3, 9, 9)),
    ("10->7 (window sums)", lambda: _after_conv(nn.AdaptiveAvgPool2d(7)), (1, 3, 10, 10)),
    ("9->6 (window sums)", lambda: _after_conv(nn.AdaptiveAvgPool2d(6)), (1, 3, 9, 9)),
    ("33->6 (window sums)", lambda: _after_conv(nn.AdaptiveAvgPool2d(6)), (1, 3, 33, 33)),
    ("64->2 (blocks)", lambda: _after_conv(nn.AdaptiveAvgPool2d(2)), (1, 3, 64, 64)),
    ("max 10->7 (window maxima)", lambda: _after_conv(nn.AdaptiveMaxPool2d(7)), (1, 3, 10, 10)),
    ("3d 5x10x10->3x7x7", lambda: SliceConvThen3dPool((3, 7, 7)), (1, 3, 5, 10, 10)),
)
MODEL_CASES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("alexnet", (1, 3, 160, 160)),
    ("vgg11", (1, 3, 160, 160)),
    ("pspnet_resnet18", (1, 3, 160, 160)),
    ("vgg11_max_pool", (1, 3, 96, 96)),
    ("r3d_18", (1, 3, 8, 64, 64)),  # 3d; no pt2e row: ExecuTorch's portable convolution is 2d only
)
GRAPHS = ("original", "fxpool", "fxpool, pool in float")
QUANTIZERS = ("dynamic", "static QDQ", "NNCF", "pt2e XNNPACK")
CALIBRATION, TESTS = 8, 4


@dataclass(frozen=True)
class Prepared:
    """One way of preparing a case: its ONNX graph (None: no graph), the pool's ONNX nodes to keep in
    float, and the module pt2e quantizes (None: torch.export cannot take it) with whether its pool
    stays in float."""

    onnx: str | None
    onnx_in_float: tuple[str, ...]
    module: nn.Module | None
    module_pool_in_float: bool = False


class SliceConvThen3dPool(nn.Module):
    """A 2d convolution on every depth slice (as video models do), then a 3d adaptive average pool.

    Not a Conv3d: ExecuTorch's portable convolution kernel is 2d only, and XNNPACK does not take a
    quantized Conv3d, so a Conv3d would fail the ExecuTorch rows for a reason that is not the pool's."""

    def __init__(self, output_size: tuple[int, int, int], channels: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool3d(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, d, h, w = x.shape
        slices = self.conv(x.transpose(1, 2).reshape(n * d, c, h, w))
        return self.pool(slices.reshape(n, d, -1, h, w).transpose(1, 2))


def _after_conv(pool: nn.Module, channels: int = 64) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), pool)


def case_rows(
    cases: Sequence[tuple[str, nn.Module, tuple[int, ...]]], folder: Path, log: Path | None = None
) -> list[dict[str, Any]]:
    """One row per case: the relative error of each preparation under each quantizer (None: no such
    graph, or the quantizer or its runtime cannot take it, or is not installed). What the exporters,
    quantizers and runtimes print goes to ``log`` (left on the console without one)."""
    quiet = (lambda: captured(log)) if log is not None else contextlib.nullcontext
    rows = []
    for name, model, shape in cases:
        torch.manual_seed(0)
        model = model.eval()
        calibration = [torch.randn(shape) for _ in range(CALIBRATION)]
        tests = [torch.randn(shape) for _ in range(TESTS)]
        with torch.no_grad():
            expected = np.concatenate([model(x).numpy().ravel() for x in tests])
        row: dict[str, Any] = {"case": name}
        with quiet():
            preparations = _prepare(model, calibration[0], folder / name.replace(" ", "_").replace("/", "_"))
        for graph, prepared in preparations.items():
            for quantizer in QUANTIZERS:
                with quiet():
                    got = _quantized_outputs(prepared, quantizer, calibration, tests)
                row[f"{graph} / {quantizer}"] = None if got is None else _relative_error(got, expected)
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def quantization_section(log: Path | None = None) -> list[dict[str, Any]]:
    """The pool cases and the zoo models, each preparation under each quantizer."""
    cases = [(name, _seeded(build_model), shape) for name, build_model, shape in POOL_CASES]
    cases += [(name, _seeded(lambda name=name: build(name)), shape) for name, shape in MODEL_CASES]
    with tempfile.TemporaryDirectory() as folder:
        return case_rows(cases, Path(folder), log)


def _seeded(build_model: Callable[[], nn.Module]) -> nn.Module:
    """The model with the weights of seed 0, whatever ran before it in the process."""
    torch.manual_seed(0)
    return build_model()


def within_bounds(row: dict[str, Any], quantizer: str) -> bool | None:
    """The conversion's error at most 1.1x the original's, or the float-pool conversion's where the
    original does not quantize and run; None where the quantizer is not installed."""
    ours = row.get(f"fxpool / {quantizer}")
    original = row.get(f"original / {quantizer}")
    in_float = row.get(f"fxpool, pool in float / {quantizer}")
    if ours is None and original is None and in_float is None:
        return None
    reference = 1.1 * original if original is not None else in_float
    return ours is not None and reference is not None and ours <= reference + 1e-9


def bound_cell(row: dict[str, Any], quantizer: str) -> str:
    """:func:`within_bounds` as a table cell: yes, NO, or - where the quantizer was not installed."""
    bound = within_bounds(row, quantizer)
    return "-" if bound is None else "yes" if bound else "NO"


def _prepare(model: nn.Module, x: torch.Tensor, stem: Path) -> dict[str, Prepared]:
    stem.mkdir(parents=True, exist_ok=True)
    original: str | None = str(stem / "original.onnx")
    try:
        torch.onnx.export(model, (x,), original, dynamo=True, verbose=False, input_names=["x"])
    except Exception:  # the dynamo exporter has no adaptive_max_pool2d: there is no original graph
        original = None
    default = fxpool.export(model, x, str(stem / "fxpool.onnx"), dynamo=True, input_names=["x"])
    converted = fxpool.convert(model, x)
    in_float = tuple(node for nodes in default.pool_nodes.values() for node in nodes)
    return {
        "original": Prepared(original, (), model),
        "fxpool": Prepared(default.path, (), converted),
        "fxpool, pool in float": Prepared(default.path, in_float, converted, module_pool_in_float=True),
    }


def _quantized_outputs(
    prepared: Prepared, quantizer: str, calibration: list[torch.Tensor], tests: list[torch.Tensor]
) -> np.ndarray | None:
    """The quantized model's outputs on ``tests``, raveled and joined; None where it cannot be had."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizers log every node they leave alone at WARNING
    try:
        if quantizer == "pt2e XNNPACK":
            return None if prepared.module is None else _pt2e_executorch(prepared, calibration, tests)
        if prepared.onnx is None:
            return None
        if quantizer == "NNCF":
            return _nncf_openvino(prepared, calibration, tests)
        return _onnxruntime(prepared, quantizer, calibration, tests)
    finally:
        root.setLevel(level)


def _onnxruntime(prepared: Prepared, quantizer: str, calibration: list[torch.Tensor], tests: list[torch.Tensor]) -> np.ndarray:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"x": x.numpy()} for x in calibration])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    assert prepared.onnx is not None
    exclude = list(prepared.onnx_in_float)
    out = f"{prepared.onnx}.{quantizer.split()[0]}.{len(exclude)}.onnx"
    if quantizer == "dynamic":
        quantize_dynamic(prepared.onnx, out, weight_type=QuantType.QInt8, nodes_to_exclude=exclude)
    else:
        quantize_static(prepared.onnx, out, Reader(), quant_format=QuantFormat.QDQ, nodes_to_exclude=exclude)
    session = onnxruntime_session(out)
    return np.concatenate([session.run(None, {"x": x.numpy()})[0].ravel() for x in tests])


def _nncf_openvino(prepared: Prepared, calibration: list[torch.Tensor], tests: list[torch.Tensor]) -> np.ndarray | None:
    try:
        import nncf
        import openvino
    except ImportError:
        return None
    logging.getLogger("nncf").setLevel(logging.ERROR)
    core = openvino.Core()
    scope = nncf.IgnoredScope(names=list(prepared.onnx_in_float), validate=False)
    dataset = nncf.Dataset([x.numpy() for x in calibration])
    quantized = nncf.quantize(core.read_model(prepared.onnx), dataset, subset_size=len(calibration), ignored_scope=scope)
    compiled = core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.concatenate([np.asarray(compiled(x.numpy())[0]).ravel() for x in tests])


def _pt2e_executorch(prepared: Prepared, calibration: list[torch.Tensor], tests: list[torch.Tensor]) -> np.ndarray | None:
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        from executorch.exir import to_edge_transform_and_lower
        from executorch.runtime import Runtime
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError:
        return None
    assert prepared.module is not None
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    if prepared.module_pool_in_float:
        quantizer.set_module_type(ExactAdaptivePool, None)  # type: ignore[arg-type]
    example = (calibration[0],)
    try:
        observed = prepare_pt2e(torch.export.export(prepared.module, example).module(), quantizer)
        with torch.no_grad():
            for x in calibration:
                observed(x)
        quantized = convert_pt2e(observed)
        lowered = to_edge_transform_and_lower(torch.export.export(quantized, example), partitioner=[XnnpackPartitioner()])
        buffer = lowered.to_executorch().buffer  # the loaded program reads this memory while it runs: keep it
        method = Runtime.get().load_program(buffer).load_method("forward")
        return np.concatenate([method.execute([x])[0].numpy().ravel() for x in tests])
    except Exception as error:  # the original's pool has no ExecuTorch kernel (max, 3d): that row has no number
        print(f"pt2e/ExecuTorch: {type(error).__name__}: {str(error)[:500]}", file=sys.stderr)  # to the case's log
        return None


def _relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


def _line(row: dict[str, Any]) -> str:
    cells = []
    for quantizer in QUANTIZERS:
        for graph in GRAPHS:
            value = row.get(f"{graph} / {quantizer}")
            cells.append("-" if value is None else f"{value:.1e}")
        cells.append(bound_cell(row, quantizer))
    return f"| {row['case']} | " + " | ".join(cells) + " |"


HEADER = (
    "| case | "
    + " | ".join(f"{q}: {g}" for q in QUANTIZERS for g in (*GRAPHS, "within bound"))
    + " |\n|"
    + "---|" * (1 + len(QUANTIZERS) * (len(GRAPHS) + 1))
    + "\n"
)
