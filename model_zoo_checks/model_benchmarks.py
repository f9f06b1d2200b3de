"""Whole-model and compiler benchmarks: what a converted model costs where it runs.

Every figure is a ratio of the converted model (or pool) over the original, measured side by side in
one run (the two alternate within every repeat, the median is reported; CUDA events on the GPU).

- ``models``: whole models in eager, converted over original, per dtype (batch 8 on CUDA, 1 on the CPU).
- ``compile``: ``torch.compile(fullgraph=True)`` of a converted pool over the compiled native pool, for a
  few pool shapes of the pools section, and of whole converted models over the compiled originals.
- ``aoti``: AOTInductor (``torch._inductor.aoti_compile_and_package`` of ``torch.export.export``) of a
  converted pyramid network against the original's package: exactness against the original in eager,
  and time.

Run through ``python -m model_zoo_checks.benchmarks --sections models compile aoti`` (``make gpu-checks``
on a GPU); each section returns its rows for ``reports/bench*.json``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

import fxpool
from fxpool.planning import choose_plan
from fxpool.replacements import ExactAdaptivePool

from .options import DTYPES
from .timing import side_by_side

# (name, input spatial size): the whole-model list, built with weights=None.
MODELS: tuple[tuple[str, int], ...] = (
    ("vgg16", 224),
    ("alexnet", 224),
    ("resnet50", 224),
    ("efficientnet_b0", 224),
    ("pspnet_resnet18", 480),
    ("smp/PSPNet-resnet34", 480),
)
# (name, family, input shape, output): pool cases compiled on their own.
COMPILED_POOLS: tuple[tuple[str, str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("psp 64→6", "avg", (16, 2048, 64, 64), (6, 6)),
    ("33→6", "avg", (32, 512, 33, 33), (6, 6)),
    ("max 10→7", "max", (64, 512, 10, 10), (7, 7)),
)
COMPILED_MODELS = ("resnet50", "pspnet_resnet18")


def _build(name: str) -> nn.Module | None:
    from .catalog import build, installed, suite_of

    if not installed(suite_of(name)):
        return None
    torch.manual_seed(0)
    return build(name)


def _batch(device: str) -> int:
    return 8 if device.startswith("cuda") else 1


def _ratio_rows(name: str, device: str, dtype: str, contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, Any]:
    times = side_by_side(contenders, repeats, warmup=3, device=device)
    converted, original = times["converted"], times["original"]
    return {
        "case": name,
        "device": device,
        "dtype": dtype,
        "original_s": original,
        "converted_s": converted,
        "ratio": converted / original,
    }


def models_section(
    device: str, dtypes: Sequence[str], repeats: int, names: Sequence[tuple[str, int]] = MODELS
) -> list[dict[str, Any]]:
    """Whole models in eager: converted over original, per dtype."""
    rows = []
    for name, size in names:
        built = _build(name)
        if built is None:
            continue
        for dtype in dtypes:
            model = built.to(device=device, dtype=DTYPES[dtype]).eval()
            x = torch.randn(_batch(device), 3, size, size, device=device, dtype=DTYPES[dtype])
            converted = fxpool.convert(model, x)
            with torch.no_grad():
                row = _ratio_rows(name, device, dtype, {"original": lambda: model(x), "converted": lambda: converted(x)}, repeats)
            row["pools"] = len(fxpool.report_of(converted).records)
            rows.append(row)
            times = f"{row['original_s'] * 1e3:.2f} | {row['converted_s'] * 1e3:.2f}"
            print(f"| {name} | {size} | {dtype} | {times} | {row['ratio']:.2f} |", flush=True)
        del built
    return rows


def compile_section(device: str, dtypes: Sequence[str], repeats: int) -> list[dict[str, Any]]:
    """torch.compile(fullgraph=True): a converted pool over the compiled native pool, and whole models."""
    rows = []
    for name, family, shape, output in COMPILED_POOLS:
        shape = shape if device.startswith("cuda") else (1,) + shape[1:]
        for dtype in dtypes:
            x = torch.randn(shape, device=device, dtype=DTYPES[dtype])
            native = (nn.AdaptiveAvgPool2d if family == "avg" else nn.AdaptiveMaxPool2d)(output)
            plan = choose_plan(family, tuple(shape[2:]), output)
            ours = ExactAdaptivePool(plan, name, device=device)
            compiled = {"original": torch.compile(native, fullgraph=True), "converted": torch.compile(ours, fullgraph=True)}
            with torch.no_grad():
                row = _ratio_rows(name, device, dtype, {k: (lambda m=m: m(x)) for k, m in compiled.items()}, repeats)
            row["kind"] = "pool"
            rows.append(row)
            print(f"| compiled pool {name} | {dtype} | {row['ratio']:.2f} |", flush=True)
    for name in COMPILED_MODELS:
        built = _build(name)
        if built is None:
            continue
        for dtype in dtypes:
            model = built.to(device=device, dtype=DTYPES[dtype]).eval()
            size = dict(MODELS).get(name, 224)
            x = torch.randn(_batch(device), 3, size, size, device=device, dtype=DTYPES[dtype])
            converted = fxpool.convert(model, x)
            compiled = {"original": torch.compile(model, fullgraph=True), "converted": torch.compile(converted, fullgraph=True)}
            with torch.no_grad():
                row = _ratio_rows(name, device, dtype, {k: (lambda m=m: m(x)) for k, m in compiled.items()}, repeats)
                error = (compiled["converted"](x).float() - model(x).float()).abs().max().item()
            row.update(kind="model", max_abs_error=error)
            rows.append(row)
            print(f"| compiled model {name} | {dtype} | {row['ratio']:.2f} | error {error:.2e} |", flush=True)
    return rows


def aoti_section(device: str, repeats: int, name: str = "pspnet_resnet18", size: int = 320) -> list[dict[str, Any]]:
    """AOTInductor packages of the original and of the converted model: exactness and time."""
    built = _build(name)
    if built is None:
        return []
    model = built.to(device).eval()
    x = torch.randn(1, 3, size, size, device=device)
    converted = fxpool.convert(model, x)
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        packages = {}
        for label, module in (("original", model), ("converted", converted)):
            program = torch.export.export(module, (x,))
            path = torch._inductor.aoti_compile_and_package(program, package_path=f"{folder}/{label}.pt2")
            packages[label] = torch._inductor.aoti_load_package(path)
        expected = model(x)
        error = (packages["converted"](x) - expected).abs().max().item()
        row = _ratio_rows(name, device, "float32", {k: (lambda p=p: p(x)) for k, p in packages.items()}, repeats)
    row.update(max_abs_error=error, scale=expected.abs().max().item())
    print(f"| AOTInductor {name} {size} | {device} | error {error:.2e} | converted / original {row['ratio']:.2f} |", flush=True)
    return [row]
