"""The ``dynamic`` benchmark section: one ``dynamic=True`` graph at sizes it was and was not exported at.

Per pool case of ``benchmarks.SHAPES`` and per intra-op thread count (1 and 2), the ONNX graphs of
``fxpool.convert(pool, x, dynamic=True)`` by each exporter (TorchScript's ``dynamic``, dynamo's
``dynamic_dynamo``, spatial axes dynamic) run at the example's size and two others (about 1.3x and 0.7x per
axis), each timed side by side with, at that size:
fxpool's static graph exported for it, OpenVINO's native AdaptiveAvgPool/AdaptiveMaxPool compiled once with
dynamic spatial dimensions, and the read-once floor (one ReduceMax over the spatial axes). Medians of
alternating repeats (``model_zoo_checks.timing``); ratios within one run are what to read on a loaded machine.

Peak memory, against input plus output (``peak / (in + out)``), two ways:

- in onnxruntime (``ort_peak_over_in_out``, ``ort_dynamo_peak_over_in_out``: each exporter's graph), the input plus
  the resident set's growth over one run in a fresh process (:func:`onnxruntime_peaks`), with the arena off and
  glibc told to map every tensor of 64 KiB or more on its own, so that a freed tensor leaves the resident set: the
  median of three runs after the first, as a deployment's runs are; the larger of a finite input and one with NaN
  (a dynamo max graph takes its flagged branch there); less the same growth for the one-node floor graph at that
  size (onnxruntime's own allocations in a run, about 0.1 MB). After its first run onnxruntime lays a graph's
  tensors out in one block planned from it (its memory pattern), which holds more than their liveness: 10->7
  over 157x512 grew 3.81x there, 2.81x with the pattern off or on the first run, as the tensors' liveness in
  graph order reads (2.82). Inputs under 1 MB read lower and vary more: 10->7 over 1x512x10x10 (0.2 MB) read
  2.6-3.2 in four processes, against 3.7-3.8 from 1.6 MB up.
- in eager (``peak_over_in_out``), what PyTorch runtimes of a ``torch.export`` program hold: the graph form run under
  a dispatch mode that counts each storage once (:class:`PeakBytes`; views add nothing), without ONNX's NaN flags.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings
import weakref
from contextlib import nullcontext
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import fxpool

from .options import ort_sessions
from .timing import side_by_side

THREADS = (1, 2)
SCALES = (1.3, 0.7)  # the two sizes beside the example's, per spatial axis


class PeakBytes(TorchDispatchMode):
    """The most bytes of storages allocated inside the block alive at once.

    A storage counts once, when an op that is not a view makes it; views of it (a Reshape, a
    Transpose before its copy, an unflatten) keep it alive and add nothing, and views of tensors made
    outside the block (the input) count nothing. Weak references to the tensors free it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._storages: dict[int, list[int]] = {}  # data_ptr -> [bytes, tensors alive on it]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(tensor, torch.Tensor) or not tensor.untyped_storage().nbytes():
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key not in self._storages:
                if func.is_view:
                    continue  # a view of a tensor made outside the block
                self._storages[key] = [storage.nbytes(), 0]
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            self._storages[key][1] += 1
            weakref.finalize(tensor, self._release, key)
        return out

    def _release(self, key: int) -> None:
        entry = self._storages[key]
        entry[1] -= 1
        if not entry[1]:
            self.live -= entry[0]
            del self._storages[key]


class FloorGraph(nn.Module):
    """The read-once floor: one reduction (ReduceMax) over the spatial axes."""

    def __init__(self, dims: int) -> None:
        super().__init__()
        self.dims = tuple(range(-dims, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.dims, keepdim=True)


def _native(family: str, output: tuple[int, ...]) -> nn.Module:
    return getattr(nn, f"Adaptive{family.capitalize()}Pool{len(output)}d")(output)


def other_sizes(spatial: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The example's spatial size and two others, about 1.3x and 0.7x per axis (at least 1)."""
    return [spatial] + [tuple(max(1, math.ceil(s * scale)) for s in spatial) for scale in SCALES]


def export_graph(module: nn.Module, x: torch.Tensor, path: str, dynamic_spatial: bool, dynamo: bool = False) -> None:
    """``module``'s ONNX graph at ``path`` by either exporter, its input named ``x``, the spatial axes dynamic or not."""
    if dynamo:  # dynamic_shapes, as the dynamo exporter asks (its dynamic_axes are translated to them)
        shapes = ({a: torch.export.Dim.DYNAMIC for a in range(2, x.dim())},) if dynamic_spatial else None
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), path, dynamo=True, input_names=["x"], dynamic_shapes=shapes)
        return
    axes = {"x": {a: f"s{a}" for a in range(2, x.dim())}} if dynamic_spatial else None
    torch.onnx.export(module, (x,), path, dynamo=False, input_names=["x"], dynamic_axes=axes)


def _openvino_dynamic(module: nn.Module, x: torch.Tensor, threads: int) -> Any:
    """OpenVINO's conversion of the original pool with dynamic spatial dimensions, compiled once; None without it."""
    try:
        import openvino
    except ImportError:
        return None
    shape = openvino.PartialShape(list(x.shape[:2]) + [-1] * (x.dim() - 2))
    model = openvino.convert_model(module, example_input=x, input=[shape])
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    return openvino.Core().compile_model(model, "CPU", config).create_infer_request()


def peak_memory(module: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """The graph form's peak in eager (:meth:`~fxpool.dynamic.DynamicAdaptiveAvgPool.traced_form`), in the form
    the TorchScript exporter traces (window slices where the module's kind is ``slices``, which only a tracer
    gets; else the window gathers; ``torch.export`` with a dynamic dimension gets one masked block per axis,
    more): the input, plus the most bytes its tensors hold at once, against input plus output."""
    slices = getattr(module, "kind", "") == "slices"
    with (
        torch.no_grad(),
        PeakBytes() as meter,
        mock.patch.object(module, "_slicing", lambda onnx: True) if slices else nullcontext(),
    ):
        out = module.traced_form(x)
    size_in, size_out = x.untyped_storage().nbytes(), out.untyped_storage().nbytes()
    peak = size_in + meter.peak
    return {"peak_MB": peak / 1e6, "peak_over_in_out": peak / (size_in + size_out)}


# One process per size: each graph's resident-set growth over one run, for a finite input and one with NaN.
_PEAK_SCRIPT = """
import json, sys
import numpy as np, onnxruntime
paths, shape = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2]))
def resident(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))
options = onnxruntime.SessionOptions()
options.enable_cpu_mem_arena, options.intra_op_num_threads, options.log_severity_level = False, 1, 3
finite = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
with_nan = finite.copy()
with_nan.reshape(-1)[::97] = np.nan
def grown(session, x):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark is now the resident set
    before = resident("VmRSS")
    out = session.run(None, {"x": x})[0]
    return resident("VmHWM") - before, out.nbytes
peaks = {}
for name, path in paths.items():
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for label, x in (("finite", finite), ("nan", with_nan)):
        session.run(None, {"x": x})  # its first run's one-off allocations are not the graph's
        peaks[f"{name} {label}"] = sorted(grown(session, x) for _ in range(3))[1]  # the median of three
print(json.dumps(peaks))
"""


def onnxruntime_peaks(paths: dict[str, str], shape: tuple[int, ...]) -> dict[str, float]:
    """``{ort_{name}_over_in_out}`` of each graph in ``paths`` but ``floor`` (see the module docstring), measured in a
    fresh process; empty where the resident set cannot be read so (not Linux)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return {}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(64 << 10))
    args = [sys.executable, "-c", _PEAK_SCRIPT, json.dumps(paths), json.dumps(list(shape))]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    peaks = json.loads(done.stdout)
    size_in = 4 * math.prod(shape)
    own = min(peaks["floor finite"][0], peaks["floor nan"][0]) - peaks["floor finite"][1]
    result = {}
    for name in paths:
        if name != "floor":
            grown, size_out = max(peaks[f"{name} finite"], peaks[f"{name} nan"])
            result[f"ort_{name}_over_in_out"] = (size_in + grown - own) / (size_in + size_out)
    return result


def dynamic_case(
    family: str, shape: tuple[int, ...], output: tuple[int, ...], repeats: int, workdir: str, with_memory: bool = True
) -> dict[str, Any]:
    """Every size and thread count of one pool case: ``{size: {t{threads}_{form}: seconds}}`` and the memory."""
    x = torch.randn(shape)
    native = _native(family, output).eval()
    dims = len(output)
    converted = fxpool.convert(native, x, dynamic=True)
    dynamic_path, dynamo_path = f"{workdir}/dynamic.onnx", f"{workdir}/dynamic_dynamo.onnx"
    export_graph(converted, x, dynamic_path, dynamic_spatial=True)
    export_graph(converted, x, dynamo_path, dynamic_spatial=True, dynamo=True)
    row: dict[str, Any] = {"form": fxpool.report_of(converted).records[0].replacement, "sizes": {}}
    requests = {threads: _openvino_dynamic(native, x, threads) for threads in THREADS}
    for spatial in other_sizes(tuple(shape[-dims:])):
        xs = torch.randn(tuple(shape[:-dims]) + spatial)
        paths = {"dynamic": dynamic_path, "dynamic_dynamo": dynamo_path}
        paths |= {"static": f"{workdir}/static.onnx", "floor": f"{workdir}/floor.onnx"}
        export_graph(fxpool.convert(native, xs), xs, paths["static"], dynamic_spatial=False)
        export_graph(FloorGraph(dims), xs, paths["floor"], dynamic_spatial=False)
        array = xs.numpy()
        times: dict[str, float] = {}
        for threads in THREADS:
            sessions = ort_sessions(paths, threads=threads)
            contenders: dict[str, Any] = {name: (lambda s=s: s.run(None, {"x": array})) for name, s in sessions.items()}
            request = requests[threads]
            if request is not None:
                contenders["openvino_dynamic"] = lambda r=request: r.infer([array])
            times.update({f"t{threads}_{name}": t for name, t in side_by_side(contenders, repeats).items()})
        if with_memory:
            pool = next(m for m in converted.modules() if hasattr(m, "traced_form"))
            times.update(peak_memory(pool, xs))
            graphs = {"peak": dynamic_path, "dynamo_peak": dynamo_path, "floor": paths["floor"]}
            times.update(onnxruntime_peaks(graphs, tuple(xs.shape)))
        row["sizes"]["x".join(map(str, spatial))] = times
    return row


def dynamic_section(shapes: Any, repeats: int, only: str = "") -> list[dict[str, Any]]:
    """One row per pool case and size (see the module docstring); prints a markdown line per row."""
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, family, shape, output in shapes:
            if only not in name:
                continue
            case = dynamic_case(family, shape, output, repeats, workdir)
            for size, times in case["sizes"].items():
                row = {"case": name, "form": case["form"], "size": size, "output": list(output), **times}
                rows.append(row)
                print(dynamic_line(row), flush=True)
    return rows


HEADER = (
    "\n| dynamic pool | size | dynamic ms (1 thread) | / static | / OpenVINO dynamic | / floor | dynamo's / static "
    "| (2 threads) / static | / OpenVINO dynamic | dynamo's / static | peak / (in + out): eager · onnxruntime "
    "(TorchScript's · dynamo's graph) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def dynamic_line(row: dict[str, Any]) -> str:
    def ratio(a: str, b: str) -> str:
        return f"{row[a] / row[b]:.2f}" if a in row and b in row else "–"

    peaks = ("peak_over_in_out", "ort_peak_over_in_out", "ort_dynamo_peak_over_in_out")
    memory = " · ".join(f"{row[key]:.2f}" if key in row else "–" for key in peaks)
    return (
        f"| {row['case']} | {row['size']} | {row['t1_dynamic'] * 1e3:.3f} | {ratio('t1_dynamic', 't1_static')} "
        f"| {ratio('t1_dynamic', 't1_openvino_dynamic')} | {ratio('t1_dynamic', 't1_floor')} "
        f"| {ratio('t1_dynamic_dynamo', 't1_static')} | {ratio('t2_dynamic', 't2_static')} "
        f"| {ratio('t2_dynamic', 't2_openvino_dynamic')} | {ratio('t2_dynamic_dynamo', 't2_static')} | {memory} |"
    )
