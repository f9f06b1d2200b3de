"""The torchvision model-zoo sweep: every model with an adaptive pool, converted, exported, checked.

Run ``python -m model_zoo_checks.zoo`` (the README's main command) for the default set, or
``--all`` for every model torchvision registers that holds an adaptive pool (found by inspection).
Per (model, size) it records the pools and their replacements, the eager error of the converted
model, the stock TorchScript export of the original, both exports of the converted model with
their onnxruntime error, onnxruntime latency against the dynamo export of the original, and a
status. Results go to ``REPORT/report.json``, ``report.md`` and ``speedup.png``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torchvision

import fxpool
from fxpool.calls import describe_module
from fxpool.cli import build_torchvision
from fxpool.exporting import op_histogram, run_onnxruntime

DEFAULT_MODELS = ("alexnet", "vgg11", "resnet18", "densenet121", "mobilenet_v2", "googlenet", "squeezenet1_1",
                  "efficientnet_b0", "mobilenet_v3_small", "r3d_18")
DEFAULT_SIZES = (160, 320)

# Per-model builder arguments (one table).
OVERRIDES: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}
# Sizes for models that are slow or need a fixed input (one table).
INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "r3d_18": (1, 3, 4, 112, 112), "mc3_18": (1, 3, 4, 112, 112), "r2plus1d_18": (1, 3, 4, 112, 112),
    "s3d": (1, 3, 8, 160, 160), "mvit_v1_b": (1, 3, 16, 224, 224), "mvit_v2_s": (1, 3, 16, 224, 224),
    "swin3d_t": (1, 3, 4, 112, 112), "swin3d_s": (1, 3, 4, 112, 112), "swin3d_b": (1, 3, 4, 112, 112),
}
# Known limitations, each with its reason: reported as skips, never dropped.
KNOWN_LIMITATIONS: dict[str, str] = {}


@dataclass
class Case:
    model: str
    input_shape: tuple[int, ...]
    status: str = "fail"  # pass / fail / skip
    reason: str = ""
    pools: int = 0
    replacements: dict[str, int] = field(default_factory=dict)
    unconverted: int = 0
    convert_s: float | None = None
    eager_max_error: float | None = None
    stock_torchscript: str = ""
    torchscript_ort_error: float | None = None
    dynamo_ort_error: float | None = None
    converted_ops: dict[str, int] = field(default_factory=dict)
    original_dynamo_ops: dict[str, int] = field(default_factory=dict)
    ort_ms_converted: float | None = None
    ort_ms_original_dynamo: float | None = None
    ort_speedup: float | None = None
    seconds: float = 0.0


def has_adaptive_pool(name: str) -> bool:
    """Inspect the model (built on the meta device, so nothing is allocated) for adaptive pools."""
    with torch.device("meta"):
        model = build(name)
    for module in model.modules():
        if describe_module(module) is not None:
            return True
        try:
            source = inspect.getsource(type(module).forward)
        except (OSError, TypeError):
            continue
        if "adaptive_avg_pool" in source or "adaptive_max_pool" in source or 'mode="area"' in source:
            return True
    return False


def build(name: str) -> torch.nn.Module:
    return build_torchvision(name, **OVERRIDES.get(name, {}))


def shape_for(name: str, size: int) -> tuple[int, ...]:
    if name in INPUT_SHAPES:
        return INPUT_SHAPES[name]
    return (1, 3, size, size)


def time_ort(path: str, args: tuple[Any, ...], repeats: int = 7) -> float:
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    session.run(None, feeds)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def check(name: str, size: int, workdir: str, exporters: Sequence[str]) -> Case:
    shape = shape_for(name, size)
    case = Case(name, shape)
    started = time.perf_counter()
    if name in KNOWN_LIMITATIONS:
        case.status, case.reason = "skip", KNOWN_LIMITATIONS[name]
        return case
    torch.manual_seed(0)
    model = build(name)
    x = torch.randn(shape)
    try:
        with torch.no_grad():
            expected = model(x)
    except Exception as error:
        case.status, case.reason = "skip", f"the original model does not run at {shape}: {error}"[:300]
        return case
    try:
        t0 = time.perf_counter()
        converted = fxpool.convert(model, x)
        case.convert_s = time.perf_counter() - t0
        report = fxpool.report_of(converted)
        case.pools, case.replacements, case.unconverted = len(report.records), report.counts(), len(report.unconverted)
        with torch.no_grad():
            got = converted(x)
        case.eager_max_error = _max_error(got, expected)
        assert case.eager_max_error <= 1e-4, f"eager error {case.eager_max_error}"
        original_path = os.path.join(workdir, f"{name}_orig_ts.onnx")
        try:
            torch.onnx.export(model, (x,), original_path, dynamo=False)
            case.stock_torchscript = "ok"
        except Exception as error:
            case.stock_torchscript = f"fails: {str(error).splitlines()[0][:120]}"
        if "torchscript" in exporters:
            path = os.path.join(workdir, f"{name}_ts.onnx")
            result = fxpool.export(model, x, path, dynamo=False, rtol=1e-3, atol=1e-4)
            case.torchscript_ort_error = result.max_abs_error
        if "dynamo" in exporters:
            path = os.path.join(workdir, f"{name}_dynamo.onnx")
            result = fxpool.export(model, x, path, dynamo=True, rtol=1e-3, atol=1e-4)
            case.dynamo_ort_error = result.max_abs_error
            case.converted_ops = result.op_histogram
            case.ort_ms_converted = time_ort(path, (x,))
            original = os.path.join(workdir, f"{name}_orig_dynamo.onnx")
            try:
                torch.onnx.export(model, (x,), original, dynamo=True, verbose=False)
                case.original_dynamo_ops = op_histogram(original)
                case.ort_ms_original_dynamo = time_ort(original, (x,))
                case.ort_speedup = case.ort_ms_original_dynamo / case.ort_ms_converted
            except Exception as error:
                case.reason = f"dynamo export of the original fails: {str(error).splitlines()[0][:120]}"
        case.status = "pass" if not case.unconverted else "fail"
        if case.unconverted:
            case.reason = "; ".join(r.reason for r in report.unconverted)[:300]
    except Exception as error:
        case.status, case.reason = "fail", f"{type(error).__name__}: {error}"[:400]
        traceback.print_exc(file=sys.stderr)
    finally:
        case.seconds = time.perf_counter() - started
        for file in Path(workdir).glob(f"{name}_*"):
            file.unlink()
    return case


def _max_error(a: Any, b: Any) -> float:
    from torch.utils._pytree import tree_leaves

    pairs = [(x, y) for x, y in zip(tree_leaves(a), tree_leaves(b)) if isinstance(x, torch.Tensor)]
    return max(((x.double() - y.double()).abs().max().item() for x, y in pairs if x.numel()), default=0.0)


def write_reports(cases: list[Case], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps([asdict(c) for c in cases], indent=2))
    (folder / "report.md").write_text(markdown(cases))
    try:
        plot(cases, folder / "speedup.png")
    except ImportError:
        pass


def markdown(cases: list[Case]) -> str:
    counts = {s: sum(c.status == s for c in cases) for s in ("pass", "fail", "skip")}
    lines = [f"# fxpool zoo sweep\n\n{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip\n",
             "| model | input | status | pools | replacements | eager err | stock TorchScript | ORT err (ts / dynamo) "
             "| ORT ms (ours / dynamo orig) | speedup | convert s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        lines.append(
            f"| {c.model} | {'x'.join(map(str, c.input_shape))} | {c.status} | {c.pools} | "
            f"{', '.join(f'{k} {v}' for k, v in c.replacements.items())} | {_fmt(c.eager_max_error)} | "
            f"{c.stock_torchscript[:60]} | {_fmt(c.torchscript_ort_error)} / {_fmt(c.dynamo_ort_error)} | "
            f"{_fmt(c.ort_ms_converted, '.2f')} / {_fmt(c.ort_ms_original_dynamo, '.2f')} | "
            f"{_fmt(c.ort_speedup, '.2f')} | {_fmt(c.convert_s, '.2f')} |")
    reasons = [f"- {c.model} {'x'.join(map(str, c.input_shape))}: {c.status}: {c.reason}" for c in cases if c.reason]
    if reasons:
        lines += ["", "## Notes", *reasons]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None, spec: str = ".1e") -> str:
    return "-" if value is None else format(value, spec)


def plot(cases: list[Case], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cases if c.ort_speedup]
    if not shown:
        return
    labels = [f"{c.model}@{c.input_shape[-1]}" for c in shown]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, max(3, 0.35 * len(shown))))
    left.barh(labels, [c.ort_speedup for c in shown], color="tab:green")
    left.axvline(1.0, color="k", lw=0.8)
    left.set_xlabel("onnxruntime speedup vs dynamo export of the original (x)")
    right.barh(labels, [max(c.eager_max_error or 0, 1e-12) for c in shown], color="tab:blue")
    right.set_xscale("log")
    right.set_xlabel("eager max |error| vs original")
    right.set_yticks([])
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fxpool zoo", description="torchvision model-zoo sweep")
    parser.add_argument("--models", nargs="*", default=None, help=f"default: {' '.join(DEFAULT_MODELS)}")
    parser.add_argument("--sizes", nargs="*", type=int, default=list(DEFAULT_SIZES))
    parser.add_argument("--all", action="store_true", help="every torchvision model with an adaptive pool")
    parser.add_argument("--exporters", nargs="*", default=["torchscript", "dynamo"], choices=["torchscript", "dynamo"])
    parser.add_argument("--device", default="cpu", help="cpu (cuda eager checks: not in this version)")
    parser.add_argument("--report", default="reports/zoo", help="folder for report.md/json and speedup.png")
    args = parser.parse_args(argv)
    if args.device != "cpu":
        parser.error("only --device cpu is implemented so far")
    if args.all:
        names = [n for n in torchvision.models.list_models() if not n.startswith("quantized_") and has_adaptive_pool(n)]
    else:
        names = list(args.models or DEFAULT_MODELS)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    jobs = [(n, s) for n in names for s in (args.sizes if n not in INPUT_SHAPES else args.sizes[:1])]
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is optional
        tqdm = None
    cases = []
    with tempfile.TemporaryDirectory() as workdir:
        progress = tqdm(jobs, unit="case") if tqdm else jobs
        for name, size in progress:
            if tqdm:
                progress.set_description(f"{name}@{size}")
            cases.append(check(name, size, workdir, args.exporters))
    folder = Path(args.report)
    write_reports(cases, folder)
    print(markdown(cases))
    print(f"reports in {folder}/ (report.md, report.json, speedup.png)")
    return 0 if all(c.status != "fail" for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
