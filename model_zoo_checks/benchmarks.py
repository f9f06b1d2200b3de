"""Benchmarks: fxpool's replacement against native pooling, a slice-loop baseline and the dynamo graph.

Every figure is a ratio measured side by side in one run: the contenders alternate within each
repeat, after a warm-up, and the median of the repeats is reported. Results go to
``reports/bench.json`` and print as a markdown table. Run ``python -m model_zoo_checks.benchmarks``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import fxpool

# (name, input shape, output size)
SHAPES: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("vgg-like N=1", (1, 512, 10, 10), (7, 7)),
    ("vgg-like N=8", (8, 512, 10, 10), (7, 7)),
    ("vgg-like N=32", (32, 512, 10, 10), (7, 7)),
    ("psp 64->6", (1, 512, 64, 64), (6, 6)),
    ("psp 64->3", (1, 512, 64, 64), (3, 3)),
    ("psp 64->2", (1, 512, 64, 64), (2, 2)),
    ("psp 64->1", (1, 512, 64, 64), (1, 1)),
    ("33->6", (1, 512, 33, 33), (6, 6)),
    ("13->6 C=2048", (1, 2048, 13, 13), (6, 6)),
    ("upsample 4x5->6", (8, 512, 4, 5), (6, 6)),
    ("uniform 7->3", (8, 512, 7, 7), (3, 3)),
    ("uniform 14->7", (8, 512, 14, 14), (7, 7)),
    ("3d 8x14x14->4x7x7", (2, 64, 8, 14, 14), (4, 7, 7)),
)


class SliceLoopPool(nn.Module):
    """The common hand-written workaround: slice every window, mean it, stack the results."""

    def __init__(self, output_size: tuple[int, ...]) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        oh, ow = self.output_size
        rows = []
        for i in range(oh):
            h0, h1 = (i * h) // oh, -((-(i + 1) * h) // oh)
            cols = []
            for j in range(ow):
                w0, w1 = (j * w) // ow, -((-(j + 1) * w) // ow)
                cols.append(x[..., h0:h1, w0:w1].mean(dim=(-2, -1)))
            rows.append(torch.stack(cols, dim=-1))
        return torch.stack(rows, dim=-2)


def native_pool(output_size: tuple[int, ...]) -> nn.Module:
    return {2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}[len(output_size)](output_size)


def side_by_side(contenders: dict[str, Callable[[], object]], repeats: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds of each contender, alternating them within every repeat."""
    for _ in range(warmup):
        for run in contenders.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def copy_bandwidth(nbytes: int = 64 << 20, repeats: int = 9) -> float:
    """Bytes per second of a plain tensor copy (read + write), measured now."""
    src = torch.empty(nbytes // 4)
    dst = torch.empty_like(src)
    seconds = side_by_side({"copy": lambda: dst.copy_(src)}, repeats)["copy"]
    return 2 * nbytes / seconds


def eager_case(shape: tuple[int, ...], output: tuple[int, ...], repeats: int) -> dict[str, float]:
    x = torch.randn(shape)
    native = native_pool(output)
    ours = fxpool.convert(native, x)
    contenders: dict[str, Callable[[], object]] = {"native": lambda: native(x), "fxpool": lambda: ours(x)}
    if len(output) == 2:
        loop = SliceLoopPool(output)
        contenders["slice_loop"] = lambda: loop(x)
    forward = side_by_side({k: _no_grad(v) for k, v in contenders.items()}, repeats)
    xg = x.clone().requires_grad_()
    models = {"native": native, "fxpool": ours, **({"slice_loop": SliceLoopPool(output)} if len(output) == 2 else {})}
    backward = side_by_side({name: (lambda m=m: m(xg).sum().backward()) for name, m in models.items()}, repeats)
    return {f"fwd_{k}": v for k, v in forward.items()} | {f"fwdbwd_{k}": v for k, v in backward.items()}


def _no_grad(run: Callable[[], object]) -> Callable[[], object]:
    def wrapped() -> object:
        with torch.no_grad():
            return run()
    return wrapped


def onnx_case(shape: tuple[int, ...], output: tuple[int, ...], repeats: int, workdir: str) -> dict[str, float]:
    import onnxruntime

    x = torch.randn(shape)
    native = native_pool(output)
    ours_path, theirs_path = f"{workdir}/ours.onnx", f"{workdir}/theirs.onnx"
    fxpool.export(native, x, ours_path, dynamo=True, verify=True)
    paths = [("fxpool", ours_path)]
    try:
        torch.onnx.export(native, (x,), theirs_path, dynamo=True)
        paths.append(("dynamo_original", theirs_path))
    except Exception:  # the dynamo exporter cannot translate some originals (3d): ours runs alone
        pass
    sessions = {name: onnxruntime.InferenceSession(p, providers=["CPUExecutionProvider"]) for name, p in paths}
    feeds = {name: {s.get_inputs()[0].name: x.numpy()} for name, s in sessions.items()}
    return {f"ort_{name}": t for name, t in side_by_side(
        {name: (lambda s=s, f=feeds[name]: s.run(None, f)) for name, s in sessions.items()}, repeats).items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fxpool-bench")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="reports/bench.json")
    parser.add_argument("--skip-onnx", action="store_true")
    args = parser.parse_args(argv)
    bandwidth = copy_bandwidth()
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, shape, output in SHAPES:
            row: dict[str, object] = {"case": name, "shape": shape, "output": output}
            row.update(eager_case(shape, output, args.repeats))
            if not args.skip_onnx:
                row.update(onnx_case(shape, output, args.repeats, workdir))
            nbytes = 4 * (torch.Size(shape).numel() + torch.Size(shape[:-len(output)] + output).numel())
            row["floor_s"] = nbytes / bandwidth
            results.append(row)
            print(_line(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"copy_bandwidth_GBps": bandwidth / 1e9, "cases": results}, indent=2))
    return 0


def _line(row: dict[str, object]) -> str:
    def ratio(a: str, b: str) -> str:
        return f"{row[a] / row[b]:.2f}" if a in row and b in row else "-"  # type: ignore[operator]
    return (f"| {row['case']} | {ratio('fwd_fxpool', 'fwd_native')} | {ratio('fwdbwd_fxpool', 'fwdbwd_native')} | "
            f"{ratio('fwdbwd_slice_loop', 'fwdbwd_fxpool')} | {ratio('ort_dynamo_original', 'ort_fxpool')} | "
            f"{ratio('fwd_fxpool', 'floor_s')} |")


if __name__ == "__main__":
    raise SystemExit(main())
