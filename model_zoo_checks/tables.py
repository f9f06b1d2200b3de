"""Markdown tables for the documentation, rendered from the JSON reports the sweeps and benchmarks write.

The results pages of ``docs/`` hold markers where their tables go; ``docs/hooks.py`` asks
:func:`render` for each while MkDocs builds, from the reports kept in ``docs/data/`` (``keep`` copies
a sweep's reports there, its cases without the exporters' full error texts). So a table cannot drift
from the run it reports.

- ``python -m model_zoo_checks.tables keep DIR... --out docs/data/NAME.json [--figure docs/results/NAME.svg]``:
  a sweep's cases (the ``report.json`` of each folder, merged), trimmed, for the docs, and the sweep's
  figure (models x stages, :mod:`model_zoo_checks.figure`) drawn from the very cases kept;
- ``python -m model_zoo_checks.tables zoo FILE_OR_DIR...``: one sweep's pass counts, pools by kind,
  exportability, conversion cost and every case;
- ``python -m model_zoo_checks.tables bench FILE``: the benchmark sections present in a ``bench.json``;
- ``python -m model_zoo_checks.tables gpu DIR``: what ``make gpu-checks`` wrote to ``DIR``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fxpool.tiling import window_conditions
from fxpool.windows import uniform_stride, upsample_factor

from .reporting import COMPATIBILITY_HEADER, EXPORTS, MARKS, STAGES, compatibility_rows, export_state


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(row) + " |" for row in rows)]


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


# What a kept sweep leaves out: the exporters' full error texts and the log paths (machine-specific).
_NOT_KEPT = ("details", "log")


def load_cases(sources: Sequence[Path]) -> list[dict[str, Any]]:
    """The cases of report folders (their report.json) or kept files, merged by (model, input shape)."""
    merged: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {}
    for source in sources:
        for case in _load(source / "report.json" if source.is_dir() else source) or []:
            merged[(case["model"], tuple(case["input_shape"]))] = case
    return sorted(merged.values(), key=lambda c: (c["model"], c["input_shape"]))


def keep(sources: Sequence[Path], out: Path, figure: Path | None = None) -> int:
    """Write the merged cases of ``sources``, trimmed, to ``out`` (and their figure to ``figure``); returns how many."""
    cases = [{k: v for k, v in case.items() if k not in _NOT_KEPT} for case in load_cases(sources)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cases, indent=1) + "\n")
    if figure is not None:
        from .figure import plot

        figure.parent.mkdir(parents=True, exist_ok=True)
        plot(cases, [figure])
    return len(cases)


# One mark per exportability state in the per-case table (legend above it).
_MARK = {"exports": "✓", "decomposed": "≈", "fails": "✗", "not tried": "–"}


def _size(case: dict[str, Any]) -> str:
    return "x".join(map(str, case["input_shape"][1:]))


def _short_size(case: dict[str, Any]) -> str:
    """A square image's side alone (``160``), else every spatial size (``4x112x112``)."""
    spatial = case["input_shape"][2:]
    return str(spatial[0]) if len(spatial) == 2 and spatial[0] == spatial[1] else "x".join(map(str, spatial))


def _forwards(case: dict[str, Any]) -> float | None:
    return case["convert_s"] / case["forward_s"] if case.get("forward_s") and case.get("convert_s") else None


def _suite_rows(cases: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Per suite: models, cases and their verdicts, pools found and converted."""
    suites: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        suites.setdefault(case.get("suite") or "torchvision", []).append(case)
    rows = []
    for suite, group in suites.items():
        tally = Counter(c["status"] for c in group)
        ran = [c for c in group if c["status"] != "skip"]
        found = sum(c.get("pools", 0) for c in ran)
        converted = found - sum(c.get("unconverted", 0) for c in ran)
        models = len({c["model"] for c in group})
        verdicts = f"{tally['pass']} pass, {tally['fail']} fail, {tally['skip']} skip"
        rows.append((suite, str(models), str(len(group)), verdicts, f"{converted}/{found}"))
    return rows


def zoo_markdown(cases: Sequence[dict[str, Any]]) -> str:
    """One sweep: the counts, the counts per suite, the compatibility table (a row per model), the exports,
    the cost, and every case in a collapsible block."""
    tally = Counter(c["status"] for c in cases)
    ran = [c for c in cases if c["status"] != "skip"]
    kinds: Counter[str] = Counter()
    for case in ran:
        kinds.update(case.get("replacements", {}))
    lines = [
        f"{len(cases)} cases of {len({c['model'] for c in cases})} models: **{tally['pass']} pass, {tally['fail']} fail, "
        f"{tally['skip']} skip**. Pools found: {sum(c.get('pools', 0) for c in ran)}, converted: "
        f"{sum(c.get('pools', 0) - c.get('unconverted', 0) for c in ran)} "
        f"({', '.join(f'{k} {n}' for k, n in kinds.most_common())}).",
        "",
    ]
    lines += _table(("suite", "models", "cases", "verdicts", "pools converted"), _suite_rows(cases)) + [""]
    legend = ", ".join(f"{mark} {state}" for state, mark in MARKS.items())
    lines += [
        "Compatibility, one row per model (search this page for yours): whether it built and ran, converted, and "
        "whether the converted model exports with each exporter, converts as a torch.export program, and agrees in "
        f"onnxruntime; where the sizes differ, one mark per size. {legend} (the exporter fails on the original at an op "
        "that is not a pool).",
        "",
    ]
    stages = len(STAGES)
    rows = [(*row[:4], " ".join(row[4 : 4 + stages]), row[-1][:200].replace("|", "/")) for row in compatibility_rows(cases)]
    lines += _table((*COMPATIBILITY_HEADER[:4], "stages: " + " · ".join(STAGES), COMPATIBILITY_HEADER[-1]), rows) + [""]
    export_rows = []
    for label, attribute in EXPORTS:
        states = Counter(export_state(c.get(attribute, "")) for c in ran)
        tried = sum(n for state, n in states.items() if state != "not tried")
        if tried:
            export_rows.append(
                (label, f"{states['exports'] + states['decomposed']}/{tried}", str(states["decomposed"]), str(states["fails"]))
            )
    if export_rows:
        lines += ["Every case, the stock model's exports beside the converted model's:", ""]
        lines += _table(("export", "exports", "of which GatherND/Where", "fails"), export_rows) + [""]
    costs = [f for f in (_forwards(c) for c in ran) if f is not None]
    if costs:
        worst = max(ran, key=lambda c: _forwards(c) or 0.0)
        lines += [
            f"Conversion cost, one call per case timed inside the sweep (so with whatever garbage collection "
            f"falls into it; the warm figures are on the benchmarks page): median {statistics.median(costs):.1f} "
            f"eager forwards of the original, worst "
            f"{max(costs):.1f} ({worst['model']} at {_size(worst)}). Summed case time "
            f"{sum(c.get('seconds', 0.0) for c in cases) / 60:.0f} min.",
            "",
        ]
    rows = []
    for c in cases:
        exports = " ".join(_MARK[export_state(c.get(attribute, ""))] for _, attribute in EXPORTS)
        pools = str(c.get("pools", 0))
        replacements = ", ".join(f"{k} {v}" for k, v in c.get("replacements", {}).items())
        forwards = _forwards(c)
        rows.append(
            (
                f"{c['model']} {_size(c)}",
                c["status"],
                f"{pools}: {replacements}" if replacements else pools,
                ("0" if c.get("eager_max_error") == 0 else _fmt(c.get("eager_max_error"), ".1e"))
                + ("" if forwards is None else f" / {forwards:.1f}x"),
                exports,
                (c.get("reason") or "")[:160].replace("|", "/"),
            )
        )
    header = ("case", "status", "pools: replacements", "eager error / convert cost", "exports", "notes")
    detail = [
        "Exports, in order: TorchScript stock, converted; dynamo stock, converted; torch.export converted. "
        "✓ exports, ≈ exports as the GatherND/Where decomposition, ✗ fails, – not tried. Convert cost: one "
        "conversion in eager forwards of the original.",
        "",
        *_table(header, rows),
    ]
    lines += [f'??? note "Every case ({len(cases)})"', ""] + ["    " + line if line else "" for line in detail]
    return "\n".join(lines) + "\n"


def when(results: dict[str, Any]) -> str:
    """The run's date as a reader writes it (``6 December 2026``), or "" where the report has none."""
    if not results.get("date"):
        return ""
    day = datetime.date.fromisoformat(results["date"])
    return f"{day.day} {day:%B %Y}"


def device_words(results: dict[str, Any], threads: str = "") -> str:
    """What the run measured on: ``the CPU (AMD EPYC, 2 cores), 2 threads`` (``threads`` where a section timed
    its own thread counts), or the GPU's name."""
    device = results.get("device_name") or "cpu"
    if device != "cpu":
        return device
    cpu = f" ({results['cpu']})" if results.get("cpu") else ""
    threads = threads or (f"{results['threads']} threads" if results.get("threads") else "")
    return f"the CPU{cpu}{', ' + threads if threads else ''}"


def measured_by(results: dict[str, Any], command: str, section: str = "", threads: str = "") -> str:
    """One line naming the run: the command, its date (``section``'s own where the report was merged from runs of
    several days: ``dates``), torch and the device (a figure's footer)."""
    date = when({"date": (results.get("dates") or {}).get(section) or results.get("date")})
    return f"{command}{f' of {date}' if date else ''}, torch {results.get('torch', '?')}, {device_words(results, threads)}"


BENCH_SECTIONS = (
    "run",
    "pools",
    "runtime",
    "dynamic",
    "convert",
    "models",
    "compile",
    "avgforms",
    "blocks",
    "quantization",
    "aoti",
)


def bench_markdown(results: dict[str, Any], sections: Sequence[str] = ()) -> str:
    """The sections of one benchmark run, each as its table under its heading; or only ``sections``
    (:data:`BENCH_SECTIONS`), without their headings, for a page that writes its own."""
    chunks = bench_chunks(results)
    if not sections:
        return "\n".join(line for chunk in chunks.values() for line in chunk)
    unknown = set(sections) - set(BENCH_SECTIONS)
    if unknown:
        raise ValueError(f"unknown benchmark sections {sorted(unknown)} (known: {', '.join(BENCH_SECTIONS)})")
    picked = []
    for section in sections:
        chunk = chunks.get(section, [])
        if chunk and chunk[0].startswith("## ") and section != "runtime":  # (one heading per thread count)
            chunk = chunk[2:]  # the page's own heading stands in for it
        if section == "runtime":  # a heading per thread count, under the page's heading of the section
            chunk = runtime_markdown((results.get("pools") or {}).get("cases", []), heading="### {threads}")
        picked += [line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in chunk]
    return "\n".join(picked)


def bench_chunks(results: dict[str, Any]) -> dict[str, list[str]]:
    """Each section's markdown lines (:data:`BENCH_SECTIONS`), those with data only."""
    date = when(results)
    dates = results.get("dates") or {}
    for day in sorted({day for day in dates.values() if day != results.get("date")}):  # sections of other days
        names = sorted(name for name, other in dates.items() if other == day)
        date += f" ({', '.join(names[:-1])}{' and ' if len(names) > 1 else ''}{names[-1]} on {when({'date': day})})"
    chunks: dict[str, list[str]] = {}
    chunks["run"] = [
        f"Measured{f' on {date}' if date else ''} with torch {results.get('torch')} on {device_words(results)}, "
        f"medians of {results.get('repeats')} alternating repeats.",
        "",
    ]
    pools = (results.get("pools") or {}).get("cases", [])
    if pools:
        lines = chunks["pools"] = ["## Each pool, converted over native", ""]
        lines += _table(
            ("case", "dtype", "forward", "forward+backward", "onnxruntime: stock dynamo graph / fxpool's"),
            [
                (
                    r["case"],
                    r["dtype"],
                    _fmt(r["fwd_fxpool"] / r["fwd_native"]),
                    _fmt(r["fwdbwd_fxpool"] / r["fwdbwd_native"]),
                    _fmt(r["ort_dynamo_original"] / r["ort_fxpool"], ".1f") if r.get("ort_dynamo_original") else "-",
                )
                for r in pools
            ],
        ) + [""]
    if runtime := runtime_markdown(pools):
        chunks["runtime"] = runtime
    if results.get("convert"):
        lines = chunks["convert"] = ["## Conversion cost", ""]
        lines += _table(
            ("model", "input", "pools", "forward ms", "convert / forward", "peak MB"),
            [
                (
                    r["model"],
                    "x".join(map(str, r["input"][2:])),
                    str(r["pools"]),
                    _fmt(r["forward_s"] * 1e3, ".1f"),
                    _fmt(r["convert_over_forward"]),
                    _fmt(r.get("convert_peak_MB"), ".0f"),
                )
                for r in results["convert"]
            ],
        ) + [""]
    if results.get("dynamic"):
        lines = chunks["dynamic"] = ["## One dynamic=True graph at three sizes", ""]
        for threads, extra in ((1, ("ms", "peak / in+out: eager · onnxruntime (TorchScript's · dynamo's)")), (2, ())):
            lines += [f"**The TorchScript exporter's graph, {threads} thread{'s' if threads > 1 else ''}**", ""]
            lines += _table(
                ("case", "size", "/ static", "/ OpenVINO dynamic", *extra),
                [
                    (
                        r["case"],
                        r["size"],
                        _over(r, f"t{threads}_dynamic", f"t{threads}_static"),
                        _over(r, f"t{threads}_dynamic", f"t{threads}_openvino_dynamic"),
                        *((_fmt(r[f"t{threads}_dynamic"] * 1e3, ".3f"), _peaks(r)) if extra else ()),
                    )
                    for r in results["dynamic"]
                ],
            ) + [""]
        if any(r.get("t1_dynamic_dynamo") for r in results["dynamic"]):
            lines += ["**The dynamo exporter's graph, over the static graph**", ""]
            lines += _table(
                ("case", "size", "1 thread", "2 threads", "1 thread / OpenVINO dynamic"),
                [
                    (
                        r["case"],
                        r["size"],
                        *(_over(r, f"t{threads}_dynamic_dynamo", f"t{threads}_static") for threads in (1, 2)),
                        _over(r, "t1_dynamic_dynamo", "t1_openvino_dynamic"),
                    )
                    for r in results["dynamic"]
                ],
            ) + [""]
    for key, title in (
        ("models", "Whole models in eager, converted over original"),
        ("compile", "torch.compile(fullgraph=True), converted over original"),
    ):
        if results.get(key):
            lines = chunks[key] = [f"## {title}", ""]
            lines += _table(
                ("case", "dtype", "original ms", "converted ms", "ratio"),
                [
                    (r["case"], r["dtype"], _fmt(r["original_s"] * 1e3), _fmt(r["converted_s"] * 1e3), _fmt(r["ratio"]))
                    for r in results[key]
                ],
            ) + [""]
    if results.get("avgforms"):
        forms = ("sliding", "slices", "gather", "window", "window_dynamo")
        lines = chunks["avgforms"] = [
            "## The exact average forms in onnxruntime, and the planner's pick",
            "",
            "Each exact form of a general average axis exported alone (TorchScript exporter) and timed side by "
            "side (one thread, ms): sliding AvgPools, window slices, gathered windows, and the window sums ONNX "
            "export gets on small planes, in bold the planner's pick for ONNX export; dynamo: the window sums "
            "as the dynamo exporter writes them (Pad and Einsum, not Concat and ReduceSum); pick / best: the "
            "pick's time over the fastest TorchScript form's.",
            "",
        ]

        def cell(row: dict[str, Any], form: str) -> str:
            if not row.get(f"ort_{form}"):
                return "-"
            text = _fmt(row[f"ort_{form}"] * 1e3)
            return f"**{text}**" if form == row["picked"] else text

        lines += _table(
            ("pool", "sliding", "slices", "gather", "window", "dynamo", "pick / best"),
            [
                (
                    f"{'x'.join(map(str, r['shape']))} → {'x'.join(map(str, r['output']))}",
                    *(cell(r, form) for form in forms),
                    _over(r, f"ort_{r['picked']}", f"ort_{r['best']}"),
                )
                for r in results["avgforms"]
            ],
        ) + [""]
    if results.get("blocks"):
        lines = chunks["blocks"] = [
            "## The block form against the pool, and the planner's pick",
            "",
            "Pools whose windows tile every axis, exported with each ONNX form forced (TorchScript exporter) and "
            "timed side by side (one thread, ms): the pool (one AveragePool or MaxPool, a 1d or 3d average as 2d "
            "ones) and the blocks (per axis a Reshape and one reduction), in bold the planner's pick; last, a 1d "
            "or 3d average's time as ONNX's own 1d or 3d AveragePool over its time as 2d ones (opset 20).",
            "",
        ]

        def timed(row: dict[str, Any], form: str) -> str:
            text = _fmt(row[f"{form}_s"] * 1e3)
            return f"**{text}**" if form == row["picked"] else text

        lines += _table(
            ("pool", "stride", "pool ms", "blocks ms", "blocks / pool", "1d/3d AveragePool / pool"),
            [
                (
                    f"{r['family']} {'x'.join(map(str, r['shape']))} → {'x'.join(map(str, r['output']))}",
                    str(r["stride"]),
                    timed(r, "pool"),
                    timed(r, "blocks"),
                    _over(r, "blocks_s", "pool_s"),
                    _over(r, "pool_nd_s", "pool_s"),
                )
                for r in results["blocks"]
            ],
        ) + [""]
    if results.get("quantization"):
        from .quantization import GRAPHS, QUANTIZERS, bound_cell

        lines = chunks["quantization"] = [
            "## Quantization: relative L2 error against the float model",
            "",
            'One table per quantizer; "-": no such graph, or the quantizer or its runtime cannot take it '
            "(an empty column: the quantizer was not installed in the run).",
            "",
        ]
        for quantizer in QUANTIZERS:
            rows = []
            for row in results["quantization"]:
                cells = [_fmt(row.get(f"{graph} / {quantizer}"), ".1e") for graph in GRAPHS]
                rows.append([row["case"], *cells, bound_cell(row, quantizer)])
            lines += [f"### {quantizer}", ""] + _table(("case", *GRAPHS, "within bound"), rows) + [""]
    if results.get("aoti"):
        lines = chunks["aoti"] = ["## AOTInductor packages, converted over original", ""]
        lines += _table(
            ("model", "max abs error (output scale)", "ratio"),
            [(r["case"], f"{r['max_abs_error']:.1e} ({r['scale']:.1f})", _fmt(r["ratio"])) for r in results["aoti"]],
        ) + [""]
    return chunks


def _over(row: dict[str, Any], a: str, b: str, spec: str = ".2f") -> str:
    return _fmt(row[a] / row[b], spec) if row.get(a) and row.get(b) else "-"


def runtime_markdown(
    cases: Sequence[dict[str, Any]], heading: str = "## Against OpenVINO's native op and the read-once floor, {threads}"
) -> list[str]:
    """Per intra-op thread count, each pool's forward against OpenVINO's native op and the read-once
    floor, from :func:`model_zoo_checks.benchmarks.runtime_case` (keys ``t{threads}_...``): one table for
    onnxruntime, one for eager and ``dynamic=True``, each narrow enough for the page."""
    lines: list[str] = []
    for threads in sorted({int(k[1 : k.index("_")]) for case in cases for k in case if k.startswith("t") and k[1:2].isdigit()}):
        key = f"t{threads}_"
        rows = [case for case in cases if case.get(key + "ort_fxpool")]
        if not rows:
            continue
        legend = not lines  # under the first thread count's heading only
        lines += [heading.format(threads=f"{threads} thread{'s' if threads > 1 else ''}"), ""]
        if legend:
            lines += [
                "Ratios of forward times from one alternating run: over OpenVINO's native op on the original module "
                "(below 1: fxpool is faster) and over the floor, one max over the spatial axes read once "
                "(onnxruntime's ReduceMax; eager's amax for eager). onnxruntime ms: fxpool's graph (TorchScript "
                'exporter). "steps graph": where ONNX export gets a form of its own (max pools with uneven windows, '
                "average pools with uneven windows on small planes, windows tiling the axes in blocks of 16 or more), "
                "the plan's steps exported instead: the gather + MaxPool form, the sliding AvgPools and window slices, "
                "or the one AveragePool/MaxPool, that torch.export keeps. Static over "
                "dynamic: fxpool's static graph over its dynamic=True graph.",
                "",
            ]
        onnxruntime = [
            (
                row["case"],
                _fmt(row[key + "ort_fxpool"] * 1e3),
                _over(row, key + "ort_fxpool", key + "openvino_native"),
                _over(row, key + "ort_fxpool", key + "ort_floor", ".1f"),
                _over(row, key + "ort_fxpool_steps", key + "openvino_native"),
                _over(row, key + "ort_fxpool", key + "ort_fxpool_dynamic"),
            )
            for row in rows
        ]
        header = ("case", "onnxruntime ms", "/ OpenVINO", "/ floor", "steps graph / OpenVINO", "static / dynamic")
        lines += _table(header, onnxruntime) + [""]
        others = [
            (
                row["case"],
                _fmt(row.get("input_MB"), ".1f"),
                _over(row, key + "ort_fxpool_dynamic", key + "openvino_native"),
                _over(row, key + "eager_fxpool", key + "openvino_native"),
                _over(row, key + "eager_fxpool", key + "eager_floor", ".1f"),
                _over(row, key + "eager_fxpool_dynamic", key + "openvino_native"),
            )
            for row in rows
        ]
        header = ("case", "input MB", "dynamic / OpenVINO", "eager / OpenVINO", "eager / eager floor", "eager dynamic / OpenVINO")
        lines += _table(header, others) + [""]
    return lines


def gpu_markdown(folder: Path) -> str:
    """What make gpu-checks wrote to ``folder``: the benchmark tables and the zoo slice."""
    lines = []
    for name in ("bench_pools.json", "bench_models.json"):
        results = _load(folder / name)
        if results:
            lines.append(bench_markdown(results))
    if (folder / "zoo" / "report.json").is_file():
        lines += ["## Zoo slice on the GPU", "", zoo_markdown(load_cases([folder / "zoo"]))]
    return "\n".join(lines)


def runtimes_markdown(results: dict[str, Any], sections: Sequence[str] = ()) -> str:
    """A ``make runtimes`` run (its runtimes.json): the line naming the run (``run``), then a table per
    runtime (``tables``); both where ``sections`` is empty."""
    from .runtimes import Row, RuntimeRun, markdown

    parts = []
    if not sections or "run" in sections:
        date = when(results)
        skipped = "".join(f" {RUNTIME_NAMES.get(r, r)}: skipped, {why}." for r, why in results.get("skipped", {}).items())
        parts.append(
            f"Measured{f' on {date}' if date else ''} with torch {results.get('torch')} on {device_words(results)}.{skipped}\n"
        )
    if not sections or "tables" in sections:
        rows = [Row(r["runtime"], r["model"], RuntimeRun(**r["original"]), RuntimeRun(**r["fxpool"])) for r in results["rows"]]
        parts.append(markdown(rows, by_runtime=True))
    return "\n".join(parts)


def _number(value: float) -> str:
    """Two significant digits, as a reader says a ratio (0.06, 0.72, 3.4, 128)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2f}" if value < 1 else f"{value:.1f}"


def _range(values: Sequence[float], unit: str = "x") -> str:
    low, high = _number(min(values)), _number(max(values))
    return f"{low}{unit}" if low == high else f"{low}–{high}{unit}"


def _lines(lines: Sequence[str]) -> str:
    """One paragraph, a line break after each line (Markdown's two trailing spaces)."""
    return "  \n".join(lines) + "\n"


def pools_caption(results: dict[str, Any]) -> str:
    """Three lines under the pools figure (:func:`model_zoo_checks.figures.pools_figure`), from its data."""
    cases = [c for c in (results.get("pools") or {}).get("cases", []) if c.get("device", "cpu") == "cpu"]
    threads = sorted({int(k[1 : k.index("_")]) for c in cases for k in c if k[:1] == "t" and k[1:2].isdigit()})
    runs = [(c, f"t{t}_") for c in cases for t in threads if c.get(f"t{t}_openvino_native") and c.get(f"t{t}_ort_fxpool")]
    if not runs:
        return ""

    def over(name: str, reference: str = "openvino_native") -> list[float]:
        return [c[k + name] / c[k + reference] for c, k in runs if c.get(k + name) and c.get(k + reference)]

    static, dynamic, floor = over("ort_fxpool"), over("ort_fxpool_dynamic"), over("ort_fxpool", "ort_floor")
    native = f"t{results.get('threads')}_openvino_native"
    stock = [c["ort_dynamo_original"] / c[native] for c in cases if c.get("ort_dynamo_original") and c.get(native)]
    counts = " and ".join(map(str, threads))
    lines = [
        f"{len(cases)} pools exported to ONNX and run by onnxruntime: each forward's time over OpenVINO's native adaptive "
        f"pool on the same input, at {counts} thread{'s' if threads[-1] > 1 else ''} (log scale; left of the orange "
        "line is faster).",
        f"fxpool's graph: {_range(static)} OpenVINO's time, faster in {sum(r < 1 for r in static)} of {len(static)} runs"
        + (f"; with `dynamic=True`: {_range(dynamic)}" if dynamic else "")
        + (
            f"; the stock dynamo exporter's graph of the original, where there is one ({len(stock)} of {len(cases)}, "
            f"{results.get('threads')} threads): {_range(stock)}."
            if stock
            else "."
        ),
        f"Grey ticks: the read-once floor, one max over the input; fxpool's graph takes {_range(floor)} its time, "
        "nearest where the windows tile the plane in large blocks.",
    ]
    return _lines(lines)


def _tiles(length: int, out_size: int) -> bool:
    """Whether an axis's windows are one native pool's (:func:`fxpool.windows.uniform_stride`) or a repeat."""
    return uniform_stride(length, out_size) is not None or upsample_factor(length, out_size) is not None


def dynamic_caption(results: dict[str, Any]) -> str:
    """Three lines under the dynamic figure (:func:`model_zoo_checks.figures.dynamic_figure`), from its data."""
    rows = [r for r in results.get("dynamic") or [] if r.get("t1_dynamic") and r.get("t1_static")]
    if not rows:
        return ""
    static = [r["t1_dynamic"] / r["t1_static"] for r in rows]
    openvino = [r["t1_dynamic"] / r["t1_openvino_dynamic"] for r in rows if r.get("t1_openvino_dynamic")]
    peaks = {key: [r[key] for r in rows if r.get(key)] for key in PEAK_KEYS}
    slower = [r for r, ratio in zip(rows, static) if ratio > 1.5]
    tiling = [r for r in slower if "output" in r and all(map(_tiles, map(int, r["size"].split("x")), r["output"]))]
    lines = [
        f"{len({r['case'] for r in rows})} pools, each one `dynamic=True` graph exported once and run by onnxruntime "
        f"at its example's size and two others ({len(rows)} runs, one thread).",
        f"Over OpenVINO's native op compiled with dynamic shapes: {_range(openvino)}, at most 1.0 in "
        f"{sum(r <= 1 for r in openvino)} of {len(openvino)}. Over fxpool's static graph for the same size: "
        f"{_range(static)}, at most 1.5 in {len(rows) - len(slower)} of {len(rows)}"
        + (
            f"; {len(tiling)} of the other {len(slower)} are sizes whose windows tile every axis (one stride and "
            "length, or each input repeated), where the static graph is one native pool, a Reshape or nothing."
            if tiling
            else "."
        ),
        _dynamo_line(rows),
        _peak_line(peaks),
    ]
    return _lines([line for line in lines if line])


PEAK_KEYS = ("peak_over_in_out", "ort_peak_over_in_out", "ort_dynamo_peak_over_in_out")  # eager, then each graph in onnxruntime


def _peaks(row: dict[str, Any]) -> str:
    """A dynamic row's peaks over input plus output: eager · onnxruntime (TorchScript's · dynamo's graph)."""
    eager, *runtime = (_fmt(row.get(key)) for key in PEAK_KEYS)
    return f"{eager} · {' · '.join(runtime)}"


def _peak_line(peaks: dict[str, list[float]]) -> str:
    """The peaks' ranges over input plus output, and how many are at most 2: the graph form in eager, each
    exporter's graph in onnxruntime."""
    eager, torchscript, dynamo = (peaks[key] for key in PEAK_KEYS)
    if not eager:
        return ""
    parts = [f"{_range(eager)} in eager ({sum(p <= 2 for p in eager)} of {len(eager)} at most 2)"]
    for name, values in (("TorchScript's", torchscript), ("dynamo's", dynamo)):
        if values:
            parts.append(f"{_range(values)} for {name} graph in onnxruntime ({sum(p <= 2 for p in values)} at most 2)")
    return "Peak memory over input plus output: " + "; ".join(parts) + "."


def _dynamo_line(rows: list[dict[str, Any]]) -> str:
    """The dynamo exporter's dynamic graphs over the static ones, and over them where its Ifs pool natively or
    reshape (:func:`fxpool.tiling.window_conditions` at each row's size)."""
    timed = [r for r in rows if r.get("t1_dynamic_dynamo")]
    if not timed:
        return ""
    ratios = [r["t1_dynamic_dynamo"] / r["t1_static"] for r in timed]
    arms: dict[str, list[dict[str, Any]]] = {"pool natively": [], "reshape": []}
    for r in timed:
        lengths = torch.tensor([int(length) for length in r["size"].split("x")])
        uniform, _, tiles, _ = window_conditions(lengths, torch.tensor(r["output"]))
        if uniform:
            arms["pool natively"].append(r)
        elif tiles and r["form"].startswith("dynamic"):  # not a global pool's mean; max pools' finite inputs too
            arms["reshape"].append(r)
    line = (
        f"The dynamo exporter's graphs over the static ones: {_range(ratios)}, at most 1.5 in "
        f"{sum(ratio <= 1.5 for ratio in ratios)} of {len(timed)}"
    )
    for arm, chosen in arms.items():
        if chosen:
            line += (
                f"; where its Ifs {arm} ({len(chosen)} sizes): "
                f"{_range([r['t1_dynamic_dynamo'] / r['t1_static'] for r in chosen])}, the TorchScript graph "
                f"{_range([r['t1_dynamic'] / r['t1_static'] for r in chosen])}"
            )
    return line + "."


def convert_caption(results: dict[str, Any]) -> str:
    """Three lines under the conversion-cost figure, from its data."""
    rows = [r for r in results.get("convert") or [] if r.get("convert_over_forward")]
    if not rows:
        return ""
    ratios = [r["convert_over_forward"] for r in rows]
    memory = [r for r in rows if r.get("convert_peak_MB") is not None]
    lines = [
        f"`fxpool.convert` on {len(rows)} models of the five suites at their default input: its time in eager forwards "
        "of the same model and input, and the peak memory it adds to the loaded model beside one forward's.",
        f"Converting takes {_range(ratios, ' forwards')} (median {statistics.median(ratios):.1f}): it runs the model "
        "on the example to find the pools, then again to check the conversion.",
    ]
    if memory:
        most = max(memory, key=lambda r: r["convert_peak_MB"])
        lines.append(
            f"It adds at most {most['convert_peak_MB']:.0f} MB ({most['model']}, whose forward alone adds "
            f"{most['forward_peak_MB']:.0f} MB)."
        )
    return _lines(lines)


# What happened to one model form on one runtime (a RuntimeRun as runtimes.json holds it), best first.
OUTCOMES = ("exact", "not run", "off", "fails")
RUNTIME_NAMES = {
    "executorch": "ExecuTorch",
    "litert": "LiteRT",
    "coreml": "Core ML",
    "openvino": "OpenVINO",
    "tensorrt": "TensorRT",
}


def outcome(run: dict[str, Any]) -> str:
    """The :data:`OUTCOMES` entry of one run: converted and ran within the bound, converted but not run
    here, ran outside the bound, or did not convert or run."""
    if not run.get("converted") or run.get("ran") is False:
        return "fails"
    if run.get("ran") is None:
        return "not run"
    error, bound = run.get("max_error"), run.get("bound")
    return "exact" if error is not None and bound is not None and error <= bound else "off"


def runtimes_caption(results: dict[str, Any]) -> str:
    """Three lines under the runtimes figure, from its data."""
    rows = results.get("rows") or []
    if not rows:
        return ""
    ours = [outcome(r["fxpool"]) for r in rows]
    theirs = [outcome(r["original"]) for r in rows]
    not_run = [r for r in rows if outcome(r["fxpool"]) == "not run"]
    why_not = {f"{RUNTIME_NAMES.get(r['runtime'], r['runtime'])}: {r['fxpool'].get('reason') or 'not run'}" for r in not_run}
    lines = [
        f"{len({r['model'] for r in rows})} models, as written (original) and converted by fxpool, each through "
        f"{len({r['runtime'] for r in rows})} deployment runtimes' converters and run against PyTorch's output.",
        f"fxpool's conversion runs exactly in {ours.count('exact')} of {len(rows)} cases"
        + (f" and converts in the other {len(not_run)} ({'; '.join(sorted(why_not))})" if not_run else "")
        + f"; {theirs.count('fails')} of the originals do not convert or do not run.",
        "Green: within 1e-4 of the output's largest magnitude (max pooling: bit for bit); light green: converted, "
        "not run; red: refused by the converter or the runtime.",
    ]
    return _lines(lines)


CAPTIONS = {"pools": pools_caption, "dynamic": dynamic_caption, "convert": convert_caption, "runtimes": runtimes_caption}


def registry_markdown(path: Path) -> str:
    """The registry census (model_zoo_checks/registry.json): per library, its models, those with an adaptive pool,
    those that cannot be built here."""
    kept = json.loads(path.read_text())
    from .catalog import suite_of

    rows = []
    for suite, version in kept["versions"].items():
        entries = [row for name, row in kept["models"].items() if suite_of(name) == suite]
        rows.append(
            (f"{suite} {version}", str(len(entries)), str(sum(r[1] for r in entries)), str(sum(bool(r[3]) for r in entries)))
        )
    header = ("library", "models registered", "with an adaptive pool", "cannot be built here")
    return "\n".join(_table(header, rows)) + "\n"


def render(kind: str, path: Path, *arguments: str) -> str:
    """The markdown of one docs marker: ``zoo``/``bench``/``runtimes``/``gpu`` of the report at ``path``, or
    ``estimate`` (:mod:`model_zoo_checks.estimate`) of a kept slice for the suite ``arguments[0]``;
    ``caption NAME`` of a figure (:data:`CAPTIONS`)."""
    if not path.exists():
        raise FileNotFoundError(f"the docs ask for a {kind} table of {path}, which does not exist")
    if kind == "caption":
        return CAPTIONS[arguments[0]](json.loads(path.read_text()))
    if kind == "zoo":
        return zoo_markdown(load_cases([path]))
    if kind == "bench":
        return bench_markdown(json.loads(path.read_text()), arguments)
    if kind == "runtimes":
        return runtimes_markdown(json.loads(path.read_text()), arguments)
    if kind == "gpu":
        return gpu_markdown(path)
    if kind == "registry":
        return registry_markdown(path)
    if kind == "estimate":  # arguments: the suite
        from .estimate import estimate, markdown

        suite = arguments[0] if arguments else "timm"
        return markdown(estimate(load_cases([path]), suite), suite)
    raise ValueError(f"unknown table kind {kind!r} (zoo, bench, runtimes, gpu, estimate, registry, caption)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.tables", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    kept = commands.add_parser("keep", help="merge report folders into one trimmed file for docs/data/")
    kept.add_argument("sources", nargs="+", type=Path)
    kept.add_argument("--out", type=Path, required=True)
    kept.add_argument("--figure", type=Path, default=None, help="also draw the kept cases' figure (models x stages) here")
    zoo = commands.add_parser("zoo")
    zoo.add_argument("sources", nargs="+", type=Path)
    for kind in ("bench", "runtimes", "gpu"):
        commands.add_parser(kind).add_argument("path", type=Path)
    args = parser.parse_args(argv)
    if args.command == "keep":
        kept_cases = keep(args.sources, args.out, args.figure)
        print(f"{kept_cases} cases kept in {args.out}" + (f", figure {args.figure}" if args.figure else ""))
    elif args.command == "zoo":
        sys.stdout.write(zoo_markdown(load_cases(args.sources)))
    else:
        sys.stdout.write(render(args.command, args.path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
