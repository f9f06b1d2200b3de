"""Figures of the measured results, drawn with matplotlib from the JSON reports the runs write.

- :func:`pools_figure`: per pool case, the forward time of fxpool's ONNX graph (static and
  ``dynamic=True``), of the stock exporter's graph of the original and of the read-once floor, each
  over OpenVINO's native op on the same input, one panel per thread count (``bench.json``'s
  ``pools`` section, CPU);
- :func:`dynamic_figure`: per pool case, one ``dynamic=True`` graph at three sizes over fxpool's static graph
  and over OpenVINO's native op with dynamic shapes (``dynamic``);
- :func:`convert_figure`: per model, ``fxpool.convert``'s time in eager forwards and the peak memory
  it adds (``convert``);
- :func:`runtimes_figure`: models x deployment runtimes, the original beside fxpool's conversion,
  coloured by what happened (``runtimes.json``);
- :func:`gpu_figure`: per pool case and dtype, eager forward and forward+backward of the conversion
  over PyTorch's native pool (a ``bench.json`` of ``--device cuda``).

Each returns ``None`` where its data has nothing to draw, so a run of some sections draws what it has.
``make bench`` and ``make runtimes`` write theirs beside their report (SVG and PNG);
``python -m model_zoo_checks.figures bench FILE --out DIR`` (or ``runtimes``, ``gpu``) draws them
again from a report without measuring (``make figures``: the site's, from ``docs/data/``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .tables import OUTCOMES, RUNTIME_NAMES, measured_by, outcome

# The same bytes for the same data: no date in the files, and fixed ids in the SVG.
STYLE = {"svg.hashsalt": "fxpool", "font.size": 9, "axes.titlesize": 10, "axes.spines.top": False, "axes.spines.right": False}
METADATA = {"svg": {"Date": None}, "png": {"Software": None}}
# Inches: the site's text column at 1280 px (750 px), so the SVG's text shows at its own size there.
WIDTH = 7.8

FXPOOL, DYNAMIC, STOCK, FLOOR, NATIVE = "#1f5fa8", "#8fb8e3", "#d1495b", "#9e9e9e", "#e8a33d"


def _spec(values: Sequence[float]) -> str:
    """A format that tells apart the values of a figure's labels (two significant digits)."""
    return ".2f" if min(values, default=1.0) < 1 else ".1f"


def _thread_counts(cases: Sequence[dict[str, Any]]) -> list[int]:
    return sorted({int(key[1 : key.index("_")]) for case in cases for key in case if key[:1] == "t" and key[1:2].isdigit()})


def pools_figure(results: dict[str, Any]) -> Figure | None:
    """Each CPU pool case's onnxruntime forward over OpenVINO's native op, one panel per thread count."""
    cases = [c for c in (results.get("pools") or {}).get("cases", []) if c.get("device", "cpu") == "cpu"]
    threads = [t for t in _thread_counts(cases) if any(c.get(f"t{t}_openvino_native") for c in cases)]
    cases = [c for c in cases if any(c.get(f"t{t}_openvino_native") and c.get(f"t{t}_ort_fxpool") for t in threads)]
    if not cases:
        return None
    # The stock graph was timed beside fxpool's dynamo graph at onnxruntime's default thread count (one
    # per core): it belongs in the panel of the run's thread count only.
    stock_threads = results.get("threads")
    bars: list[tuple[str, str, Callable[[dict[str, Any], int], float | None]]] = [
        ("fxpool's graph", FXPOOL, lambda c, t: c.get(f"t{t}_ort_fxpool")),
        ("fxpool's graph, dynamic=True", DYNAMIC, lambda c, t: c.get(f"t{t}_ort_fxpool_dynamic")),
        ("the stock dynamo exporter's graph", STOCK, lambda c, t: c.get("ort_dynamo_original") if t == stock_threads else None),
    ]

    def ratios(time: Callable[[dict[str, Any], int], float | None], t: int) -> list[tuple[int, float]]:
        return [
            (y, time(c, t) / c[f"t{t}_openvino_native"])
            for y, c in enumerate(cases)
            if time(c, t) and c.get(f"t{t}_openvino_native")
        ]

    floor = ("the read-once floor", FLOOR, lambda c, t: c.get(f"t{t}_ort_floor"))
    shown = [b for b in bars if any(ratios(b[2], t) for t in threads)]
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(WIDTH, 1.6 + 0.3 * len(cases)), layout="constrained")
        axes = figure.subplots(1, len(threads), sharey=True, squeeze=False)[0]
        for ax, t in zip(axes, threads):
            panel = [(label, colour, r) for label, colour, time in shown if (r := ratios(time, t))]
            height = 0.8 / len(panel)
            for i, (_, colour, points) in enumerate(panel):
                ys = [y - 0.4 + height * (i + 0.5) for y, _ in points]
                values = [v for _, v in points]
                # Bars grow from 1 (OpenVINO's time): leftwards where faster, rightwards where slower.
                ax.barh(ys, [v - 1 for v in values], left=1, height=height, color=colour)
                if i == 0:
                    for y, v in zip(ys, values):
                        ax.annotate(
                            f"{v:{_spec(values)}}",
                            (min(v, 1), y),
                            xytext=(-2, 0),
                            textcoords="offset points",
                            ha="right",
                            va="center",
                            fontsize=7,
                        )
            if points := ratios(floor[2], t):
                ax.scatter([v for _, v in points], [y for y, _ in points], marker="|", s=110, linewidths=2, color=FLOOR, zorder=3)
            ax.axvline(1, color=NATIVE, linewidth=2)
            ax.set_xscale("log")
            ax.set_title(f"{t} thread{'s' if t > 1 else ''}")
            ax.grid(axis="x", which="major", alpha=0.3)
        low = min(a.get_xlim()[0] for a in axes)
        high = max(a.get_xlim()[1] for a in axes)
        for ax in axes:
            ax.set_xlim(low, high)
        axes[0].set_yticks(range(len(cases)), [c["case"] for c in cases])
        axes[0].set_ylim(len(cases) - 0.5, -0.5)
        handles = [Patch(color=colour, label=label) for label, colour, _ in shown]
        handles += [Line2D([], [], color=FLOOR, marker="|", linestyle="", markersize=10, markeredgewidth=2, label=floor[0])]
        handles += [Line2D([], [], color=NATIVE, linewidth=2, label="OpenVINO's native op")]
        figure.legend(handles=handles, loc="outside upper center", ncol=3, frameon=False)
        figure.supxlabel(
            "forward time in onnxruntime ÷ OpenVINO's native op's (log scale; left of the orange line: faster)\n"
            + measured_by(results, "make bench", "pools", " and ".join(map(str, threads)) + " threads"),
            fontsize=8,
        )
    return figure


def convert_figure(results: dict[str, Any]) -> Figure | None:
    """Per model: ``fxpool.convert``'s time in eager forwards, and the peak memory of a forward and of convert."""
    rows = [r for r in results.get("convert") or [] if r.get("convert_over_forward")]
    if not rows:
        return None
    memory = [r for r in rows if r.get("convert_peak_MB") is not None]
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(WIDTH, 1.3 + 0.3 * len(rows)), layout="constrained")
        time_ax, memory_ax = figure.subplots(1, 2, sharey=True, width_ratios=(1.0, 1.0 if memory else 0.01))
        ys = range(len(rows))
        values = [r["convert_over_forward"] for r in rows]
        bars = time_ax.barh(ys, values, height=0.6, color=FXPOOL)
        time_ax.bar_label(bars, [f"{v:.1f}" for v in values], padding=2, fontsize=7)
        time_ax.set_title("time, in eager forwards of the model")
        time_ax.set_yticks(list(ys), [r["model"] for r in rows])
        time_ax.set_ylim(len(rows) - 0.5, -0.5)
        time_ax.grid(axis="x", alpha=0.3)
        if memory:
            where = {r["model"]: y for y, r in enumerate(rows)}
            ys_memory = [where[r["model"]] for r in memory]
            memory_ax.barh(
                [y - 0.17 for y in ys_memory], [r["forward_peak_MB"] for r in memory], height=0.34, color=FLOOR, label="one forward"
            )
            bars = memory_ax.barh(
                [y + 0.17 for y in ys_memory],
                [r["convert_peak_MB"] for r in memory],
                height=0.34,
                color=FXPOOL,
                label="fxpool.convert",
            )
            memory_ax.bar_label(bars, [f"{r['convert_peak_MB']:.0f}" for r in memory], padding=2, fontsize=7)
            memory_ax.set_title("peak memory above the model, MB")
            memory_ax.legend(loc="lower right", frameon=False)
            memory_ax.grid(axis="x", alpha=0.3)
        else:
            memory_ax.set_axis_off()
        figure.supxlabel(measured_by(results, "make bench", "convert"), fontsize=8)
    return figure


def dynamic_figure(results: dict[str, Any]) -> Figure | None:
    """Per pool case, its one ``dynamic=True`` graph at three sizes, one thread: over fxpool's static graph for
    each size, and over OpenVINO's native op compiled with dynamic shapes (``bench.json``'s ``dynamic``)."""
    rows = [r for r in results.get("dynamic") or [] if r.get("t1_dynamic") and r.get("t1_static")]
    if not rows:
        return None
    names = list(dict.fromkeys(r["case"] for r in rows))
    panels = (
        ("÷ fxpool's static graph", "t1_static", 1.5),
        ("÷ OpenVINO's dynamic op", "t1_openvino_dynamic", 1.0),
    )
    markers = ("o", "^", "v")  # the example's size, about 1.3x and 0.7x of it: a case's rows in that order
    marker_of = [markers[[other["case"] for other in rows[:i]].count(r["case"]) % len(markers)] for i, r in enumerate(rows)]
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(WIDTH, 1.7 + 0.3 * len(names)), layout="constrained")
        axes = figure.subplots(1, 2, sharey=True)
        for ax, (title, key, goal) in zip(axes, panels):
            for r, marker in zip(rows, marker_of):
                if r.get(key):
                    ax.scatter(r["t1_dynamic"] / r[key], names.index(r["case"]), marker=marker, s=22, color=FXPOOL, zorder=3)
                if r.get(key) and r.get("t1_dynamic_dynamo"):  # the dynamo exporter's graph: hollow
                    y, ratio = names.index(r["case"]), r["t1_dynamic_dynamo"] / r[key]
                    ax.scatter(ratio, y, marker=marker, s=22, facecolors="none", edgecolors=FXPOOL, zorder=3)
            ax.axvline(goal, color=NATIVE, linewidth=2)
            ax.set_xscale("log")
            ax.set_title(title)
            ax.grid(axis="x", which="major", alpha=0.3)
        axes[0].set_yticks(range(len(names)), names)
        axes[0].set_ylim(len(names) - 0.5, -0.5)
        handles = [
            Line2D([], [], color=FXPOOL, marker=m, linestyle="", label=label)
            for m, label in zip(markers, ("the example's size", "about 1.3x it", "about 0.7x it"))
        ]
        if any(r.get("t1_dynamic_dynamo") for r in rows):
            handles += [
                Line2D([], [], color=FXPOOL, marker="o", markerfacecolor="none", linestyle="", label="dynamo exporter's graph")
            ]
        handles += [Line2D([], [], color=NATIVE, linewidth=2, label="the issue's goal (1.5x static, 1.0x OpenVINO)")]
        figure.legend(handles=handles, loc="outside upper center", ncol=4, frameon=False, fontsize=8)
        figure.supxlabel(
            "the dynamic graph's forward time in onnxruntime, one thread, log scale (filled: the TorchScript exporter's graph,\n"
            "hollow: the dynamo exporter's; left of the orange line: within the goal)\n"
            + measured_by(results, 'make bench BENCH_ARGS="--sections dynamic"', "dynamic", "1 thread"),
            fontsize=8,
        )
    return figure


# The runtimes figure's colours and words, by tables.OUTCOMES entry.
OUTCOME_STYLE = {
    "exact": ("runs, exact", "#3a9d5d"),
    "not run": ("converts, not run here", "#a8d5b5"),
    "off": ("runs, not exact", "#e8a33d"),
    "fails": ("does not convert or run", "#d1495b"),
}


def runtimes_figure(results: dict[str, Any]) -> Figure | None:
    """Models x runtimes, two cells per runtime (the original, fxpool's conversion), coloured by outcome."""
    rows = results.get("rows") or []
    if not rows:
        return None
    runtimes = list(dict.fromkeys(r["runtime"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    keys = list(OUTCOMES)
    styles = [OUTCOME_STYLE[key] for key in keys]
    grid = [[math.nan] * (2 * len(runtimes)) for _ in models]
    for r in rows:
        column = 2 * runtimes.index(r["runtime"])
        for offset, form in enumerate(("original", "fxpool")):
            grid[models.index(r["model"])][column + offset] = keys.index(outcome(r[form]))
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(max(4.5, 2.6 + 1.3 * len(runtimes)), 1.5 + 0.3 * len(models)), layout="constrained")
        ax = figure.subplots()
        colours = ListedColormap([colour for _, colour in styles])
        ax.imshow(grid, cmap=colours, vmin=-0.5, vmax=len(keys) - 0.5, aspect="auto")
        ax.set_yticks(range(len(models)), models)
        ax.set_xticks(range(2 * len(runtimes)), ["original", "fxpool"] * len(runtimes), fontsize=7)
        ax.tick_params(length=0)
        top = ax.secondary_xaxis("top")
        top.set_xticks([2 * i + 0.5 for i in range(len(runtimes))], [RUNTIME_NAMES.get(r, r) for r in runtimes])
        top.tick_params(length=0)
        for i in range(1, 2 * len(runtimes)):
            ax.axvline(i - 0.5, color="white", linewidth=4 if i % 2 == 0 else 1)
        for y in range(len(models)):
            ax.axhline(y + 0.5, color="white", linewidth=1)
        for spine in (*ax.spines.values(), *top.spines.values()):
            spine.set_visible(False)
        seen = {value for row in grid for value in row if not math.isnan(value)}
        handles = [Patch(color=colour, label=label) for i, (label, colour) in enumerate(styles) if i in seen]
        figure.legend(handles=handles, loc="outside right upper", frameon=False)
        figure.supxlabel(measured_by(results, "make runtimes"), fontsize=8)
    return figure


def gpu_figure(results: dict[str, Any]) -> Figure | None:
    """Per CUDA pool case and dtype: eager forward and forward+backward, fxpool's conversion over native."""
    cases = [c for c in (results.get("pools") or {}).get("cases", []) if str(c.get("device", "")).startswith("cuda")]
    cases = [c for c in cases if c.get("fwd_fxpool") and c.get("fwd_native")]
    if not cases:
        return None
    names = list(dict.fromkeys(c["case"] for c in cases))
    dtypes = list(dict.fromkeys(c["dtype"] for c in cases))
    shades = ["#1f5fa8", "#8fb8e3", "#e8a33d", "#3a9d5d"]
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(WIDTH, 1.4 + 0.3 * len(names) * max(1.0, len(dtypes) / 3)), layout="constrained")
        axes = figure.subplots(1, 2, sharey=True)
        height = 0.8 / len(dtypes)
        for ax, (title, key) in zip(axes, (("forward", "fwd"), ("forward+backward", "fwdbwd"))):
            for i, dtype in enumerate(dtypes):
                points = [
                    (names.index(c["case"]) - 0.4 + height * (i + 0.5), c[f"{key}_fxpool"] / c[f"{key}_native"])
                    for c in cases
                    if c["dtype"] == dtype and c.get(f"{key}_fxpool") and c.get(f"{key}_native")
                ]
                if points:
                    ys, values = zip(*points)
                    ax.barh(ys, [v - 1 for v in values], left=1, height=height, color=shades[i % len(shades)], label=dtype)
            ax.axvline(1, color=NATIVE, linewidth=2)
            ax.set_xscale("log")
            ax.set_title(title)
            ax.set_xlabel("time ÷ PyTorch's native pool (log; left of 1: faster)")
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(names)), names)
        axes[0].set_ylim(len(names) - 0.5, -0.5)
        axes[0].legend(loc="lower right", frameon=False)
        figure.supxlabel(measured_by(results, "make gpu-checks"), fontsize=8)
    return figure


# The figures of each report kind, by file stem: (kind's figures, stem suffix)
FIGURES: dict[str, tuple[tuple[str, Callable[[dict[str, Any]], Figure | None]], ...]] = {
    "bench": (("pools", pools_figure), ("dynamic", dynamic_figure), ("convert", convert_figure)),
    "runtimes": (("runtimes", runtimes_figure),),
    "gpu": (("pools", gpu_figure),),
}


def write_figures(kind: str, results: dict[str, Any], out: Path, stem: str, formats: Sequence[str] = ("svg", "png")) -> list[Path]:
    """Draw every figure of ``kind`` that ``results`` has data for into ``out`` as ``STEM-NAME.FORMAT``
    (``runtimes``: ``STEM.FORMAT``); returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FIGURES[kind]:
        figure = draw(results)
        if figure is None:
            continue
        base = stem if name == kind else f"{stem}-{name}"
        for fmt in formats:
            path = out / f"{base}.{fmt}"
            with matplotlib.rc_context(STYLE):
                figure.savefig(path, format=fmt, dpi=110, metadata=METADATA.get(fmt))
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.figures", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=list(FIGURES))
    parser.add_argument("report", type=Path, help="the JSON report of the run (bench.json, runtimes.json)")
    parser.add_argument("--out", type=Path, help="default: the report's folder")
    parser.add_argument("--stem", help="file names start with this (default: the report's name)")
    parser.add_argument("--formats", nargs="*", default=["svg", "png"], choices=["svg", "png", "pdf"])
    args = parser.parse_args(argv)
    results = json.loads(args.report.read_text())
    written = write_figures(args.kind, results, args.out or args.report.parent, args.stem or args.report.stem, args.formats)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{args.report} holds nothing to draw as {args.kind} figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
