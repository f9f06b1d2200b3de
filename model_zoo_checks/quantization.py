"""How well fxpool's graphs quantize: onnxruntime's quantizers on the original's graph and on fxpool's.

Every case is a float model exported to ONNX four ways — the stock dynamo export of the original (its
AveragePool, ReduceMean or GatherND/Where decomposition; absent where it does not export), fxpool's
default graph (averaging matrices as MatMul), fxpool's ``quantizable=True`` graph (as Einsum) and the
default graph with the pool's nodes kept in float (``nodes_to_exclude``, named by
``ExportResult.pool_nodes``) — then quantized by ``onnxruntime.quantization.quantize_dynamic`` (int8
weights) and ``quantize_static`` (QDQ, eight calibration inputs), and compared with the float PyTorch
model on four fixed test inputs: the relative L2 error ``|ort - torch| / |torch|``.

The bound the ``quantizable`` graph is held to (:func:`within_bounds`): at most 1.1 times the error of
the quantized original where the original exports, else at most the error of the default graph with
its pool left in float.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import fxpool

from .catalog import build

# (name, builder, input shape): a convolution, then the pool (nothing after it to hide its error).
POOL_CASES: tuple[tuple[str, Callable[[], nn.Module], tuple[int, ...]], ...] = (
    ("12->6 (AvgPool)", lambda: _after_conv(nn.AdaptiveAvgPool2d(6)), (1, 3, 12, 12)),
    ("9->1 (mean)", lambda: _after_conv(nn.AdaptiveAvgPool2d(1)), (1, 3, 9, 9)),
    ("10->7 (Kronecker)", lambda: _after_conv(nn.AdaptiveAvgPool2d(7)), (1, 3, 10, 10)),
    ("9->6 (Kronecker)", lambda: _after_conv(nn.AdaptiveAvgPool2d(6)), (1, 3, 9, 9)),
    ("33->6 (separable)", lambda: _after_conv(nn.AdaptiveAvgPool2d(6)), (1, 3, 33, 33)),
    ("max 10->7 (gather)", lambda: _after_conv(nn.AdaptiveMaxPool2d(7)), (1, 3, 10, 10)),
    (
        "3d 5x10x10->3x7x7",
        lambda: nn.Sequential(nn.Conv3d(3, 16, 3, padding=1), nn.AdaptiveAvgPool3d((3, 7, 7))),
        (1, 3, 5, 10, 10),
    ),
)
MODEL_CASES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("alexnet", (1, 3, 160, 160)),
    ("vgg11", (1, 3, 160, 160)),
    ("pspnet_resnet18", (1, 3, 160, 160)),
    ("vgg11_max_pool", (1, 3, 96, 96)),
)
GRAPHS = ("original", "fxpool", "fxpool quantizable", "fxpool, pool in float")
QUANTIZERS = ("dynamic", "static QDQ")
CALIBRATION, TESTS = 8, 4


def _after_conv(pool: nn.Module, channels: int = 64) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), pool)


def case_rows(cases: Sequence[tuple[str, nn.Module, tuple[int, ...]]], folder: Path) -> list[dict[str, Any]]:
    """One row per case: the relative error of each graph under each quantizer (None: no such graph)."""
    rows = []
    for name, model, shape in cases:
        torch.manual_seed(0)
        model = model.eval()
        calibration = [torch.randn(shape) for _ in range(CALIBRATION)]
        tests = [torch.randn(shape) for _ in range(TESTS)]
        with torch.no_grad():
            expected = [model(x).numpy() for x in tests]
        graphs = _graphs(model, calibration[0], folder / name.replace(" ", "_").replace("/", "_"))
        row: dict[str, Any] = {"case": name}
        for graph, (path, exclude) in graphs.items():
            for quantizer in QUANTIZERS:
                key = f"{graph} / {quantizer}"
                row[key] = None if path is None else _quantized_error(path, quantizer, exclude, calibration, tests, expected)
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def quantization_section() -> list[dict[str, Any]]:
    """The pool cases and the zoo models, each graph under each quantizer."""
    cases = [(name, build_model(), shape) for name, build_model, shape in POOL_CASES]
    cases += [(name, build(name), shape) for name, shape in MODEL_CASES]
    with tempfile.TemporaryDirectory() as folder:
        return case_rows(cases, Path(folder))


def within_bounds(row: dict[str, Any], quantizer: str) -> bool:
    """The quantizable graph's error at most 1.1x the original's, or the float-pool graph's where the original does not export."""
    ours = row[f"fxpool quantizable / {quantizer}"]
    original = row[f"original / {quantizer}"]
    reference = 1.1 * original if original is not None else row[f"fxpool, pool in float / {quantizer}"]
    return ours is not None and ours <= reference + 1e-9


def _graphs(model: nn.Module, x: torch.Tensor, stem: Path) -> dict[str, tuple[str | None, list[str]]]:
    stem.mkdir(parents=True, exist_ok=True)
    graphs: dict[str, tuple[str | None, list[str]]] = {}
    original = str(stem / "original.onnx")
    try:
        torch.onnx.export(model, (x,), original, dynamo=True, verbose=False, input_names=["x"])
        graphs["original"] = (original, [])
    except Exception:  # the dynamo exporter has no adaptive_max_pool2d: there is no original graph
        graphs["original"] = (None, [])
    default = fxpool.export(model, x, str(stem / "fxpool.onnx"), dynamo=True, input_names=["x"])
    graphs["fxpool"] = (default.path, [])
    quantizable = fxpool.export(model, x, str(stem / "quantizable.onnx"), dynamo=True, input_names=["x"], quantizable=True)
    graphs["fxpool quantizable"] = (quantizable.path, [])
    in_float = [node for nodes in default.pool_nodes.values() for node in nodes]
    graphs["fxpool, pool in float"] = (default.path, in_float)
    return graphs


def _quantized_error(
    path: str,
    quantizer: str,
    exclude: list[str],
    calibration: list[torch.Tensor],
    tests: list[torch.Tensor],
    expected: list[np.ndarray],
) -> float:
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"x": x.numpy()} for x in calibration])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    out = f"{path}.{quantizer.split()[0]}.{len(exclude)}.onnx"
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizers log every node they leave alone at WARNING
    try:
        if quantizer == "dynamic":
            quantize_dynamic(path, out, weight_type=QuantType.QInt8, nodes_to_exclude=exclude)
        else:
            quantize_static(path, out, Reader(), quant_format=QuantFormat.QDQ, nodes_to_exclude=exclude)
    finally:
        root.setLevel(level)
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    got = np.concatenate([session.run(None, {"x": x.numpy()})[0].ravel() for x in tests])
    want = np.concatenate([e.ravel() for e in expected])
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _line(row: dict[str, Any]) -> str:
    cells = []
    for quantizer in QUANTIZERS:
        for graph in GRAPHS:
            value = row[f"{graph} / {quantizer}"]
            cells.append("-" if value is None else f"{value:.1e}")
        cells.append("yes" if within_bounds(row, quantizer) else "NO")
    return f"| {row['case']} | " + " | ".join(cells) + " |"


HEADER = (
    "| case | "
    + " | ".join(f"{q}: {g}" for q in QUANTIZERS for g in (*GRAPHS, "within bound"))
    + " |\n|"
    + "---|" * (1 + len(QUANTIZERS) * (len(GRAPHS) + 1))
    + "\n"
)
