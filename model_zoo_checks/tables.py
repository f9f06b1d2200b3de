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
import json
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def bench_markdown(results: dict[str, Any]) -> str:
    """The sections of one benchmark run, each as its table."""
    lines = [
        f"Measured with torch {results.get('torch')} on {results.get('device_name', 'cpu')}, "
        f"{results.get('threads')} threads, medians of {results.get('repeats')} alternating repeats.",
        "",
    ]
    pools = (results.get("pools") or {}).get("cases", [])
    if pools:
        lines += ["## Each pool, converted over native", ""]
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
    lines += runtime_markdown(pools)
    if results.get("convert"):
        lines += ["## Conversion cost", ""]
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
    for key, title in (
        ("models", "Whole models in eager, converted over original"),
        ("compile", "torch.compile(fullgraph=True), converted over original"),
    ):
        if results.get(key):
            lines += [f"## {title}", ""]
            lines += _table(
                ("case", "dtype", "original ms", "converted ms", "ratio"),
                [
                    (r["case"], r["dtype"], _fmt(r["original_s"] * 1e3), _fmt(r["converted_s"] * 1e3), _fmt(r["ratio"]))
                    for r in results[key]
                ],
            ) + [""]
    if results.get("avgforms"):
        forms = ("sliding", "slices", "gather", "window", "window_dynamo")
        lines += [
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
    if results.get("maxforms"):
        lines += [
            "## The max family's two layouts in onnxruntime, and the planner's pick",
            "",
            "ONNX export's window maxima of a general max pool exported alone (TorchScript exporter) in the "
            "input's layout and with the spatial axes moved in front, timed side by side at one and two "
            "threads (ms), in bold the planner's pick (spatial axes first where the last-axis copies per input "
            "entry, in brackets, reach `SPATIAL_FIRST_MIN_COPIES`); pick / best: the pick's time over the faster "
            "layout's.",
            "",
        ]

        def layout_cell(row: dict[str, Any], threads: int, form: str) -> str:
            text = _fmt(row[f"t{threads}_ort_{form}"] * 1e3)
            return f"**{text}**" if form == row["picked"] else text

        lines += _table(
            ("pool (copies)", "input layout", "spatial first", "pick / best", "2 threads: input", "spatial first", "pick / best"),
            [
                (
                    f"{'x'.join(map(str, r['shape']))} → {'x'.join(map(str, r['output']))} ({_fmt(r['copies'])})",
                    *(
                        cell
                        for t in (1, 2)
                        for cell in (
                            layout_cell(r, t, "input_layout"),
                            layout_cell(r, t, "spatial_first"),
                            _over(r, f"t{t}_ort_{r['picked']}", f"t{t}_ort_{r[f't{t}_best']}"),
                        )
                    ),
                )
                for r in results["maxforms"]
            ],
        ) + [""]
    if results.get("quantization"):
        from .quantization import GRAPHS, QUANTIZERS, bound_cell

        lines += [
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
        lines += ["## AOTInductor packages, converted over original", ""]
        lines += _table(
            ("model", "max abs error (output scale)", "ratio"),
            [(r["case"], f"{r['max_abs_error']:.1e} ({r['scale']:.1f})", _fmt(r["ratio"])) for r in results["aoti"]],
        ) + [""]
    return "\n".join(lines)


def _over(row: dict[str, Any], a: str, b: str, spec: str = ".2f") -> str:
    return _fmt(row[a] / row[b], spec) if row.get(a) and row.get(b) else "-"


def runtime_markdown(cases: Sequence[dict[str, Any]]) -> list[str]:
    """Per intra-op thread count, each pool's forward against OpenVINO's native op and the read-once
    floor, from :func:`model_zoo_checks.benchmarks.runtime_case` (keys ``t{threads}_...``): one table for
    onnxruntime, one for eager and ``dynamic=True``, each narrow enough for the page."""
    lines: list[str] = []
    for threads in sorted({int(k[1 : k.index("_")]) for case in cases for k in case if k.startswith("t") and k[1:2].isdigit()}):
        key = f"t{threads}_"
        rows = [case for case in cases if case.get(key + "ort_fxpool")]
        if not rows:
            continue
        lines += [
            f"## Against OpenVINO's native op and the read-once floor, {threads} thread{'s' if threads > 1 else ''}",
            "",
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


def runtimes_markdown(results: dict[str, Any]) -> str:
    """The runtime x model table of a ``make runtimes`` run (its runtimes.json)."""
    from .runtimes import Row, RuntimeRun, markdown

    rows = [Row(r["runtime"], r["model"], RuntimeRun(**r["original"]), RuntimeRun(**r["fxpool"])) for r in results["rows"]]
    skipped = "".join(f"\n{runtime}: skipped, {why}\n" for runtime, why in results.get("skipped", {}).items())
    return f"Measured with torch {results.get('torch')}.\n\n" + markdown(rows) + skipped


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
    ``estimate`` (:mod:`model_zoo_checks.estimate`) of a kept slice for the suite ``arguments[0]``."""
    if not path.exists():
        raise FileNotFoundError(f"the docs ask for a {kind} table of {path}, which does not exist")
    if kind == "zoo":
        return zoo_markdown(load_cases([path]))
    if kind == "bench":
        return bench_markdown(json.loads(path.read_text()))
    if kind == "runtimes":
        return runtimes_markdown(json.loads(path.read_text()))
    if kind == "gpu":
        return gpu_markdown(path)
    if kind == "registry":
        return registry_markdown(path)
    if kind == "estimate":  # arguments: the suite
        from .estimate import estimate, markdown

        suite = arguments[0] if arguments else "timm"
        return markdown(estimate(load_cases([path]), suite), suite)
    raise ValueError(f"unknown table kind {kind!r} (zoo, bench, runtimes, gpu, estimate, registry)")


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
