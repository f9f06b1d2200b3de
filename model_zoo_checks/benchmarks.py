"""Benchmarks: fxpool's replacements against native pooling, a slice-loop baseline and the dynamo graph.

Every figure is a ratio measured side by side in one run: the contenders alternate within each
repeat, after a warm-up, and the median of the repeats is reported. Sections:

- ``pools``: per pool shape, eager forward and forward+backward (a dense upstream gradient, as in
  training) against native ``adaptive_avg_pool2d``/``adaptive_max_pool2d`` and a slice-loop module;
  onnxruntime against the dynamo exporter's graph of the original; the memory floor (input read
  once, output written once, at the copy bandwidth measured in the same run). On the CPU, per
  intra-op thread count (1 and 2), one alternating run of every form (:func:`runtime_case`):
  fxpool static and ``dynamic=True`` in eager and in onnxruntime, OpenVINO's native op on the
  original module, and the read-once floor (one max over the spatial axes) in eager and in
  onnxruntime; where ONNX export gets a form of its own (``PoolPlan.onnx_steps``), the graph of the
  plan's steps beside it. ``--device cuda`` times with CUDA events in ``--dtypes``
  (float32, float16, bfloat16) and leaves out onnxruntime and OpenVINO.
- ``convert``: ``fxpool.convert`` time as a multiple of one eager forward (the two alternating), for a
  fixed list across the five suites at their default input, and the conversion's peak memory above
  the original's own forward (resident set size, each model in a process of its own).
- ``avgforms``: each exact form of a general average axis (sliding AvgPools, window slices, gathered
  windows, and ONNX export's window sums in the spatial-first layout) exported alone and timed side
  by side in onnxruntime (one thread), against the planner's pick: the data
  :data:`fxpool.planning.SLIDING_MAX_LENGTH`, ``SLICES_MAX_WINDOWS`` and ``WINDOW_SUMS_MIN_COPIES``
  are fitted to.
- ``blocks``: the block form against the pool where windows tile every axis, in onnxruntime (one thread), and the
  planner's pick: the data :data:`fxpool.planning.BLOCK_MIN_LENGTHS` are fitted to
  (:mod:`model_zoo_checks.block_benchmarks`).
- ``dynamic``: one ``dynamic=True`` graph per pool case run at the example's size and two others, against
  fxpool's static graph for each size, OpenVINO's native op compiled with dynamic shapes and the read-once
  floor, at 1 and 2 threads, with its peak memory (:mod:`model_zoo_checks.dynamic_benchmarks`).
- ``quantization``: onnxruntime's dynamic and static (QDQ) quantizers, OpenVINO's NNCF and PyTorch 2
  export quantization run by ExecuTorch, on the original and on fxpool's conversion, per replacement
  kind and on zoo models (:mod:`model_zoo_checks.quantization`; third-party output in
  ``bench-logs/quantization.log`` beside ``--out``).

Run ``python -m model_zoo_checks.benchmarks`` (``make bench``); results go to ``reports/bench.json``
and print as markdown tables; the figures of :mod:`model_zoo_checks.figures` go beside the JSON
(``reports/bench-pools.svg`` and ``.png``, ``bench-convert``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import fxpool
import fxpool.replacements
from fxpool.exporting import exporter_reason
from fxpool.planning import choose_plan

from . import block_benchmarks, dynamic_benchmarks, model_benchmarks, quantization
from .options import DTYPES, add_device_options, device_and_dtypes, draw_figures, ort_sessions, run_facts
from .timing import side_by_side

# (name, family, input shape, output size)
SHAPES: tuple[tuple[str, str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("vgg-like 10→7, N=1", "avg", (1, 512, 10, 10), (7, 7)),
    ("vgg-like 10→7, N=8", "avg", (8, 512, 10, 10), (7, 7)),
    ("vgg-like 10→7, N=32", "avg", (32, 512, 10, 10), (7, 7)),
    ("psp 64→6", "avg", (1, 512, 64, 64), (6, 6)),
    ("psp 64→3 (uniform)", "avg", (1, 512, 64, 64), (3, 3)),
    ("psp 64→2 (blocks)", "avg", (1, 512, 64, 64), (2, 2)),
    ("psp 64→1 (mean)", "avg", (1, 512, 64, 64), (1, 1)),
    ("33→6", "avg", (1, 512, 33, 33), (6, 6)),
    ("33→6, N=4, C=256", "avg", (4, 256, 33, 33), (6, 6)),
    ("100×60→6, N=2, C=256", "avg", (2, 256, 100, 60), (6, 6)),
    ("13→6, C=2048 (uniform)", "avg", (1, 2048, 13, 13), (6, 6)),
    ("upsample 4×5→6, N=8", "avg", (8, 512, 4, 5), (6, 6)),
    ("uniform 7→3, N=8", "avg", (8, 512, 7, 7), (3, 3)),
    ("uniform 14→7, N=8", "avg", (8, 512, 14, 14), (7, 7)),
    ("3d 8×14×14→4×7×7 (uniform)", "avg", (2, 64, 8, 14, 14), (4, 7, 7)),
    ("3d 5×10×10→3×7×7, N=2, C=64", "avg", (2, 64, 5, 10, 10), (3, 7, 7)),
    ("1d 1000→101, N=8, C=64", "avg", (8, 64, 1000), (101,)),
    ("max vgg-like 10→7, N=8", "max", (8, 512, 10, 10), (7, 7)),
    ("max psp 64→6", "max", (1, 512, 64, 64), (6, 6)),
    ("max 33→6", "max", (1, 512, 33, 33), (6, 6)),
    ("max 100×60→6, N=2, C=256", "max", (2, 256, 100, 60), (6, 6)),
    ("max 3d 9×10×11→4×3×7, N=2, C=64", "max", (2, 64, 9, 10, 11), (4, 3, 7)),
    ("max uniform 14→7, N=8", "max", (8, 512, 14, 14), (7, 7)),
    ("max 25→7, N=4, C=256", "max", (4, 256, 25, 25), (7, 7)),
    ("max 1d 1000→101, N=8, C=64", "max", (8, 64, 1000), (101,)),
    ("max 4×8→6×16 (gather + upsample), N=8", "max", (8, 512, 4, 8), (6, 16)),
)
# Across the suites, at each model's default input (model_zoo_checks.catalog names).
CONVERT_MODELS = (
    "resnet50",
    "efficientnet_b0",
    "densenet121",
    "regnet_y_32gf",
    "timm/resnet18:catavgmax",
    "timm/efficientnet_b0",
    "timm/regnetx_002",
    "smp/PSPNet-resnet18",
    "smp/UPerNet-mobilenet_v2",
    "hf/resnet",
    "hf/efficientnet",
    "hf/upernet:convnext",
    "hf/mobilenet_v2",
    "monai/SEResNet50",
    "monai/DenseNet121",
    "monai/EfficientNetBN-b0",
)
# (input shape, output size): general average axes, short windows to long ones, few windows to many
AVERAGE_FORM_CASES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((8, 512, 10, 10), (7, 7)),
    ((8, 512, 14, 14), (6, 6)),
    ((1, 512, 11, 11), (4, 4)),
    ((1, 512, 20, 20), (7, 7)),
    ((1, 512, 33, 33), (6, 6)),
    ((1, 512, 40, 40), (6, 6)),
    ((1, 256, 64, 48), (6, 40)),
    ((1, 512, 64, 64), (6, 6)),
    ((2, 256, 100, 60), (6, 6)),
    ((8, 64, 6, 6), (17, 17)),
    ((8, 64, 1000), (101,)),
    ((8, 64, 1000), (600,)),
    ((2, 16, 3000), (101,)),
    ((2, 64, 5, 10, 10), (3, 7, 7)),
)


class SliceLoopPool(nn.Module):
    """The common hand-written workaround: slice every window, reduce it, stack the results."""

    def __init__(self, output_size: tuple[int, ...], family: str = "avg") -> None:
        super().__init__()
        self.output_size = output_size
        self.family = family

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        oh, ow = self.output_size
        rows = []
        for i in range(oh):
            h0, h1 = (i * h) // oh, -((-(i + 1) * h) // oh)
            cols = []
            for j in range(ow):
                w0, w1 = (j * w) // ow, -((-(j + 1) * w) // ow)
                window = x[..., h0:h1, w0:w1]
                cols.append(window.mean(dim=(-2, -1)) if self.family == "avg" else window.amax(dim=(-2, -1)))
            rows.append(torch.stack(cols, dim=-1))
        return torch.stack(rows, dim=-2)


def native_pool(family: str, output_size: tuple[int, ...]) -> nn.Module:
    modules = {
        ("avg", 1): nn.AdaptiveAvgPool1d,
        ("max", 1): nn.AdaptiveMaxPool1d,
        ("avg", 2): nn.AdaptiveAvgPool2d,
        ("avg", 3): nn.AdaptiveAvgPool3d,
        ("max", 2): nn.AdaptiveMaxPool2d,
        ("max", 3): nn.AdaptiveMaxPool3d,
    }
    return modules[family, len(output_size)](output_size)


def copy_bandwidth(nbytes: int = 64 << 20, repeats: int = 9) -> float:
    """Bytes per second of a plain tensor copy (read + write), measured now."""
    src = torch.empty(nbytes // 4)
    dst = torch.empty_like(src)
    seconds = side_by_side({"copy": lambda: dst.copy_(src)}, repeats)["copy"]
    return 2 * nbytes / seconds


def eager_case(
    family: str,
    shape: tuple[int, ...],
    output: tuple[int, ...],
    repeats: int,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """Forward and forward+backward seconds of native, fxpool and (2d) the slice loop."""
    x = torch.randn(shape, device=device, dtype=dtype)
    native = native_pool(family, output)
    models: dict[str, nn.Module] = {"native": native, "fxpool": fxpool.convert(native, x)}
    if len(output) == 2:
        models["slice_loop"] = SliceLoopPool(output, family)
    with torch.no_grad():
        forward = side_by_side({k: (lambda m=m: m(x)) for k, m in models.items()}, repeats, device=device)
    xg = x.clone().requires_grad_()
    grad = torch.randn_like(native(x))
    backward = side_by_side({k: (lambda m=m: m(xg).backward(grad)) for k, m in models.items()}, repeats, device=device)
    return {f"fwd_{k}": v for k, v in forward.items()} | {f"fwdbwd_{k}": v for k, v in backward.items()}


def onnx_case(family: str, shape: tuple[int, ...], output: tuple[int, ...], repeats: int, workdir: str) -> dict[str, Any]:
    """onnxruntime seconds of fxpool's graph and of the dynamo exporter's graph of the original."""
    x = torch.randn(shape)
    native = native_pool(family, output).eval()
    ours_path, theirs_path = f"{workdir}/ours.onnx", f"{workdir}/theirs.onnx"
    fxpool.export(native, x, ours_path, dynamo=True, verify=True)
    paths = [("fxpool", ours_path)]
    row: dict[str, Any] = {}
    try:
        torch.onnx.export(native, (x,), theirs_path, dynamo=True, verbose=False)
        paths.append(("dynamo_original", theirs_path))
    except Exception as error:  # e.g. adaptive max pooling at non-divisible sizes, 3d: ours runs alone
        row["dynamo_original_error"] = exporter_reason(error)
    sessions = ort_sessions(dict(paths))
    feeds = {name: {s.get_inputs()[0].name: x.numpy()} for name, s in sessions.items()}
    row.update(
        {
            f"ort_{name}": t
            for name, t in side_by_side(
                {name: (lambda s=s, f=feeds[name]: s.run(None, f)) for name, s in sessions.items()}, repeats
            ).items()
        }
    )
    return row


RUNTIME_THREADS = (1, 2)  # intra-op threads of onnxruntime, OpenVINO and eager in runtime_case


class SpatialMax(nn.Module):
    """The read-once floor: one maximum over the spatial axes (ReduceMax in ONNX)."""

    def __init__(self, dims: int) -> None:
        super().__init__()
        self.dims = tuple(range(-dims, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.dims, keepdim=True)


def _openvino_native(module: nn.Module, x: torch.Tensor, threads: int) -> Any:
    """OpenVINO's conversion of the original module (its native AdaptiveAvgPool/AdaptiveMaxPool op),
    compiled for the CPU with ``threads`` threads and float32 inference; ``None`` without openvino."""
    try:
        import openvino
    except ImportError:
        return None
    model = openvino.convert_model(module, example_input=x)
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    return openvino.Core().compile_model(model, "CPU", config).create_infer_request()


def runtime_case(
    family: str, shape: tuple[int, ...], output: tuple[int, ...], repeats: int, workdir: str, threads: int
) -> dict[str, float]:
    """Forward seconds of every form at ``threads`` intra-op threads, alternating in one run.

    Keys ``t{threads}_{form}``: ``eager_native``, ``eager_fxpool``, ``eager_fxpool_dynamic``,
    ``eager_floor`` (torch at ``threads`` threads); ``ort_fxpool``, ``ort_fxpool_dynamic``,
    ``ort_floor`` (onnxruntime, spinning off, graphs from the TorchScript exporter, ``dynamo=False``);
    ``ort_fxpool_steps`` where the plan has an ONNX form of its own (``PoolPlan.onnx_steps``): the
    plan's ``steps`` that ``torch.export`` keeps, exported as such (gather + MaxPool; sliding AvgPools or
    window slices; the one AveragePool/MaxPool blocks replace); ``openvino_native``.
    """
    from dataclasses import replace

    from fxpool.replacements import ExactAdaptivePool

    x = torch.randn(shape)
    native = native_pool(family, output).eval()
    dims = len(output)
    static = fxpool.convert(native, x)
    graphs: dict[str, nn.Module] = {
        "fxpool": static,
        "fxpool_dynamic": fxpool.convert(native, x, dynamic=True),
        "floor": SpatialMax(dims),
    }
    plan = choose_plan(family, tuple(shape[-dims:]), output)  # type: ignore[arg-type]
    if plan.onnx_steps:
        graphs["fxpool_steps"] = ExactAdaptivePool(replace(plan, onnx_steps=()))
    paths = {}
    for name, module in graphs.items():
        paths[name] = f"{workdir}/{name}.onnx"
        torch.onnx.export(module, (x,), paths[name], dynamo=False)
    sessions = ort_sessions(paths, threads=threads)
    array = x.numpy()
    contenders: dict[str, Any] = {
        f"ort_{name}": (lambda s=s: s.run(None, {s.get_inputs()[0].name: array})) for name, s in sessions.items()
    }
    eager_modules = {"native": native, "fxpool": static, "fxpool_dynamic": graphs["fxpool_dynamic"], "floor": graphs["floor"]}
    contenders.update({f"eager_{name}": (lambda m=m: m(x)) for name, m in eager_modules.items()})
    request = _openvino_native(native, x, threads)
    if request is not None:
        contenders["openvino_native"] = lambda: request.infer([array])
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            times = side_by_side(contenders, repeats)
    finally:
        torch.set_num_threads(saved)
    return {f"t{threads}_{name}": t for name, t in times.items()}


def pools_section(repeats: int, device: str, dtypes: Sequence[str], with_onnx: bool, only: str = "") -> dict[str, Any]:
    bandwidth = copy_bandwidth() if device == "cpu" else None
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, family, shape, output in SHAPES:
            if only not in name:
                continue
            for dtype in dtypes:
                row: dict[str, Any] = {
                    "case": name,
                    "family": family,
                    "shape": shape,
                    "output": output,
                    "device": device,
                    "dtype": dtype,
                }
                row.update(eager_case(family, shape, output, repeats, device, DTYPES[dtype]))
                if with_onnx and device == "cpu" and dtype == "float32":
                    row.update(onnx_case(family, shape, output, repeats, workdir))
                    for threads in RUNTIME_THREADS:
                        row.update(runtime_case(family, shape, output, repeats, workdir, threads))
                if bandwidth:
                    size = DTYPES[dtype].itemsize
                    nbytes = size * (torch.Size(shape).numel() + torch.Size(shape[: -len(output)] + output).numel())
                    row["floor_s"] = nbytes / bandwidth
                    row["input_MB"] = size * torch.Size(shape).numel() / 1e6
                rows.append(row)
                print(_pool_line(row), flush=True)
    return {"copy_bandwidth_GBps": bandwidth / 1e9 if bandwidth else None, "cases": rows}


def convert_section(repeats: int = 5, names: Sequence[str] = CONVERT_MODELS) -> list[dict[str, Any]]:
    """Conversion time against one eager forward, alternating, and the conversion's extra peak memory."""
    from .catalog import build, input_shapes, installed, suite_of

    rows = []
    for name in names:
        if not installed(suite_of(name)):
            continue
        shape = input_shapes(name, None, with_native=False)[0]
        torch.manual_seed(0)
        model = build(name, shape)
        x = torch.randn(shape)
        with torch.no_grad():
            times = side_by_side(
                {"forward": lambda m=model: m(x), "convert": lambda m=model: fxpool.convert(m, x)}, repeats, warmup=1, sample_s=0.0
            )
        report = fxpool.report_of(fxpool.convert(model, x))
        memory = _convert_memory(name)
        row = {
            "model": name,
            "input": list(shape),
            "parameters_M": sum(p.numel() for p in model.parameters()) / 1e6,
            "pools": len(report.records),
            "intercepted": len(report.intercepted),
            "forward_s": times["forward"],
            "convert_s": times["convert"],
            "convert_over_forward": times["convert"] / times["forward"],
            "overhead_s": times["convert"] - times["forward"],
            **memory,
        }
        rows.append(row)
        print(_convert_line(row), flush=True)
        del model
    return rows


def _convert_line(row: dict[str, Any]) -> str:
    memory = row.get("convert_peak_MB")
    return (
        f"| {row['model']} | {'x'.join(map(str, row['input'][1:]))} | {row['parameters_M']:.1f} M | {row['pools']} | "
        f"{row['intercepted']} | {row['forward_s'] * 1e3:.1f} | {row['convert_s'] * 1e3:.0f} | {row['convert_over_forward']:.2f} | "
        + ("-" if memory is None else f"{memory:.0f} of {row['forward_peak_MB']:.0f}")
        + " |"
    )


def _convert_memory(name: str) -> dict[str, float | None]:
    """Peak resident memory above the model of one forward, then of convert, in a fresh process.

    Linux resets the process's high-water mark (VmHWM) when 5 is written to /proc/self/clear_refs,
    so each peak is measured from what was resident just before it.
    """
    import subprocess
    import sys

    script = (
        "import json, re, torch, fxpool\n"
        "from model_zoo_checks.catalog import build, input_shapes\n"
        "def status(key):\n"
        "    return int(re.search(key + r':\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)) / 1024\n"
        "def peak_above(run):\n"
        "    open('/proc/self/clear_refs', 'w').write('5')\n"
        "    before = status('VmRSS'); run(); return status('VmHWM') - before\n"
        f"name = {name!r}\n"
        "shape = input_shapes(name, None, with_native=False)[0]\n"
        "torch.manual_seed(0); model = build(name, shape); x = torch.randn(shape)\n"
        "def forward():\n"
        "    with torch.no_grad(): model(x)\n"
        "forward()\n"  # the allocator's own first-use growth is not the forward's
        "forward = peak_above(forward)\n"
        "convert = peak_above(lambda: fxpool.convert(model, x))\n"
        "print(json.dumps({'forward_peak_MB': forward, 'convert_peak_MB': convert}))\n"
    )
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, check=True)
        return json.loads(run.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return {"forward_peak_MB": None, "convert_peak_MB": None}


def _forced_forms(x: torch.Tensor, output: tuple[int, ...], workdir: str) -> tuple[dict[str, nn.Module], dict[str, str]]:
    """The average pool planned as each of its exact forms (:func:`fxpool.planning.forced_form`), and its graph from
    the TorchScript exporter: the modules and the ONNX paths, by form."""
    from fxpool import planning
    from fxpool.replacements import ExactAdaptivePool

    modules: dict[str, nn.Module] = {}
    paths = {}
    for form in planning.AVERAGE_FORM_LIMITS:
        with planning.forced_form(form):
            modules[form] = ExactAdaptivePool(planning.choose_plan("avg", tuple(x.shape[-len(output) :]), output))
        paths[form] = f"{workdir}/{form}.onnx"
        torch.onnx.export(modules[form], (x,), paths[form], dynamo=False)
    return modules, paths


def average_forms_section(repeats: int) -> list[dict[str, Any]]:
    """Every exact form of each case's general average axes, in onnxruntime (one thread), and the pick."""
    from fxpool import planning

    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for shape, output in AVERAGE_FORM_CASES:
            dims = len(output)
            x = torch.randn(shape)
            modules, paths = _forced_forms(x, output, workdir)
            paths["window_dynamo"] = f"{workdir}/window_dynamo.onnx"  # the window form as the dynamo exporter writes it
            torch.onnx.export(modules["window"], (x,), paths["window_dynamo"], dynamo=True, verbose=False)
            sessions = ort_sessions(paths, threads=1)
            array = x.numpy()
            times = side_by_side(
                {f: (lambda s=s: s.run(None, {s.get_inputs()[0].name: array})) for f, s in sessions.items()}, repeats
            )
            window_dynamo = times.pop("window_dynamo")
            chosen = planning.choose_plan("avg", tuple(shape[-dims:]), output)
            picked = (
                "window"
                if chosen.onnx_steps
                else next((a.kind for a in chosen.axes if a.kind in planning.AVERAGE_FORM_LIMITS), "gather")
            )
            best = min(times, key=times.__getitem__)
            row = {"shape": list(shape), "output": list(output), "chosen": chosen.describe_onnx(), "picked": picked, "best": best}
            row.update({f"ort_{form}": t for form, t in times.items()}, ort_window_dynamo=window_dynamo)
            rows.append(row)
            cells = " | ".join(f"{t * 1e3:.3f}" for t in (*times.values(), window_dynamo))
            label = f"{'x'.join(map(str, shape))}→{'x'.join(map(str, output))}"
            print(f"| {label} | {cells} | {picked} | {best} | {times[picked] / times[best]:.2f} |", flush=True)
    return rows


def _ratio(row: dict[str, Any], a: str, b: str, spec: str = ".2f") -> str:
    return format(row[a] / row[b], spec) if a in row and b in row else "-"


def _pool_line(row: dict[str, Any]) -> str:
    label = row["case"] if row["dtype"] == "float32" else f"{row['case']} {row['dtype']}"
    cells = [
        _ratio(row, "fwd_fxpool", "fwd_native"),
        _ratio(row, "fwdbwd_fxpool", "fwdbwd_native"),
        _ratio(row, "fwdbwd_slice_loop", "fwdbwd_fxpool", ".1f"),
        _ratio(row, "ort_dynamo_original", "ort_fxpool", ".1f"),
        _ratio(row, "fwd_fxpool", "floor_s", ".1f"),
        _ratio(row, "fwd_native", "floor_s", ".1f"),
    ]
    return f"| {label} | " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections",
        nargs="*",
        default=["pools", "convert", "avgforms", "blocks", "dynamic", "quantization"],
        choices=["pools", "convert", "avgforms", "blocks", "quantization", "models", "compile", "aoti", "dynamic"],
        help="models, compile and aoti (whole models, torch.compile, AOTInductor: model_zoo_checks.model_benchmarks) "
        "are asked for by name; make gpu-checks runs them on the GPU",
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--convert-repeats", type=int, default=5, help="alternating forward/convert pairs per model")
    add_device_options(parser, "cpu or cuda (pools, models, compile, aoti; the rest are CPU measurements)")
    parser.add_argument("--skip-onnx", action="store_true")
    parser.add_argument("--cases", default="", help="pools: only the cases whose name holds this text (e.g. max)")
    parser.add_argument("--out", default="reports/bench.json")
    args = parser.parse_args(argv)
    device, dtypes = device_and_dtypes(parser, args)
    results: dict[str, Any] = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        **run_facts(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for section in args.sections:
        if section not in ("pools", "models", "compile", "aoti") and device != "cpu":
            continue  # the conversion cost and the fits are CPU measurements
        print(HEADERS.get(section, ""), end="")
        results[section] = run_section(section, args, device, dtypes)
        out.write_text(json.dumps(results, indent=2))  # after every section: a run cut short keeps what it measured
    draw_figures("gpu" if device.startswith("cuda") else "bench", results, out)
    return 0


HEADERS = {
    "pools": "| case | fwd / native | fwd+bwd / native | slice-loop / fxpool (fwd+bwd) | ORT dynamo-original / fxpool "
    "| fwd / floor | native fwd / floor |\n|---|---|---|---|---|---|---|\n",
    "convert": "\n| model | input | parameters | pools | intercepted modules | forward ms | convert ms | convert / forward "
    "| convert's extra peak MB, of the forward's |\n|---|---|---|---|---|---|---|---|---|\n",
    "avgforms": "\n| average pool | ORT sliding ms | ORT slices ms | ORT gather ms | ORT window ms "
    "| ORT window (dynamo) ms | picked | best | picked / best |\n|---|---|---|---|---|---|---|---|---|\n",
    "blocks": block_benchmarks.HEADER,
    "quantization": "\n" + quantization.HEADER,
    "dynamic": dynamic_benchmarks.HEADER,
    "models": "\n| model | size | dtype | original ms | converted ms | converted / original |\n|---|---|---|---|---|---|\n",
    "compile": "\n| torch.compile(fullgraph=True) | dtype | converted / original |\n|---|---|---|\n",
}


def run_section(section: str, args: argparse.Namespace, device: str, dtypes: tuple[str, ...]) -> Any:
    if section == "pools":
        return pools_section(args.repeats, device, dtypes, not args.skip_onnx, args.cases)
    if section == "convert":
        return convert_section(args.convert_repeats)
    if section == "avgforms":
        return average_forms_section(args.repeats)
    if section == "blocks":
        return block_benchmarks.blocks_section(args.repeats)
    if section == "dynamic":
        return dynamic_benchmarks.dynamic_section(SHAPES, args.repeats, args.cases)
    if section == "quantization":
        return quantization.quantization_section(log=Path(args.out).parent / "bench-logs" / "quantization.log")
    if section == "models":
        return model_benchmarks.models_section(device, dtypes, args.repeats)
    if section == "compile":
        return model_benchmarks.compile_section(device, dtypes, args.repeats)
    return model_benchmarks.aoti_section(device, args.repeats)


if __name__ == "__main__":
    raise SystemExit(main())
