"""The zoo sweep's reports: ``report.json`` (one record per case), ``report.md``, ``zoo.png`` and the console summary."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

STATUSES = ("pass", "fail", "skip")
# The exportability columns: (label, Case attribute), stock original first; "converted" is the plain
# export (no fxpool code around the call) of fxpool.convert's model.
EXPORTS = (
    ("TorchScript, stock", "stock_torchscript"),
    ("TorchScript, converted", "converted_torchscript"),
    ("dynamo, stock", "stock_dynamo"),
    ("dynamo, converted", "converted_dynamo"),
    ("torch.export, converted", "converted_torch_export"),
)
PICTURE = "zoo.png"


def write_reports(cases: Sequence[Any], folder: Path, picture: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps([asdict(c) for c in cases], indent=2))
    (folder / "report.md").write_text(markdown(cases))
    if not picture:
        return
    try:
        plot(cases, folder / PICTURE)
    except ImportError:  # matplotlib is optional
        pass


def counts(cases: Sequence[Any]) -> dict[str, int]:
    return {s: sum(c.status == s for c in cases) for s in STATUSES}


def export_state(text: str) -> str:
    """One word for an exportability entry: exports, decomposed (GatherND/Where), fails or not tried."""
    if not text:
        return "not tried"
    if text.startswith("ok:"):
        return "decomposed"
    return "exports" if text == "ok" else "fails"


def summary(cases: Sequence[Any]) -> str:
    """What the console shows at the end: a few lines that answer what fxpool did for these models."""
    tally = counts(cases)
    ran = [c for c in cases if c.status != "skip"]
    lines = [
        f"fxpool zoo: {len(cases)} cases of {len({c.model for c in cases})} models: "
        f"{tally['pass']} pass, {tally['fail']} fail, {tally['skip']} skip"
    ]
    for label, attribute in EXPORTS:
        states = [export_state(getattr(c, attribute)) for c in ran]
        tried = [s for s in states if s != "not tried"]
        if tried:
            decomposed = tried.count("decomposed")
            lines.append(
                f"  {label:<24} exports {tried.count('exports') + decomposed}/{len(tried)}"
                + (f" ({decomposed} only as the GatherND/Where decomposition)" if decomposed else "")
            )
    programs = [c for c in ran if getattr(c, "pt2_pools", None) is not None]
    if programs:
        found = sum(c.pt2_pools for c in programs)
        lines.append(
            f"  PT2 in, PT2 out: {sum(c.pt2 == 'ok' for c in programs)} of {len(programs)} torch.export programs of the "
            f"originals converted exactly; {found} ATen pools, {sum(c.pt2_converted for c in programs)} replaced"
        )
    fallback = [c for c in ran if getattr(c, "fxpool_torchscript", "") or getattr(c, "fxpool_dynamo", "")]
    if fallback:
        lines.append(f"  fxpool.export was needed beside the plain exports on {len(fallback)} case(s)")
    pools = sum(c.pools for c in ran)
    kinds: dict[str, int] = {}
    for c in ran:
        for kind, n in c.replacements.items():
            kinds[kind] = kinds.get(kind, 0) + n
    lines.append(
        f"  pools: {pools} found, {sum(c.pools - c.unconverted for c in ran)} converted ("
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        + ")"
    )
    errors = [c.eager_max_error for c in ran if c.eager_max_error is not None]
    if errors:
        lines.append(f"  eager: largest |converted - original| {max(errors):.1e} (float32)")
    costs = [(c.convert_s / c.forward_s, c) for c in ran if getattr(c, "forward_s", None) and c.convert_s]
    if costs:
        ratio, worst = max(costs, key=lambda pair: pair[0])
        lines.append(
            f"  convert (one cold call per case): median {statistics.median(r for r, _ in costs):.1f} forwards of the "
            f"original, worst {ratio:.1f} "
            f"({worst.model}@{'x'.join(map(str, worst.input_shape[2:]))}: {worst.convert_s:.2f} s against "
            f"{worst.forward_s * 1e3:.0f} ms), longest {max(c.convert_s for _, c in costs):.2f} s"
        )
    speeds = distinct_pool_speeds(cases)
    ratios = [row["ort_ms_stock"] / row["ort_ms_fxpool"] for row in speeds if row["ort_ms_stock"]]
    stock_fails = sum(1 for row in speeds if not row["ort_ms_stock"])
    if ratios:
        lines.append(
            f"  pools alone in onnxruntime, stock dynamo graph / fxpool graph: median {statistics.median(ratios):.1f}x "
            f"(from {min(ratios):.1f}x to {max(ratios):.1f}x over {len(ratios)} distinct pools)"
            + (f"; {stock_fails} more the stock dynamo exporter cannot export" if stock_fails else "")
        )
    whole = [c.ort_speedup for c in ran if c.ort_speedup]
    noise = [c.ort_noise for c in ran if c.ort_noise]
    if whole:
        band = f"; the same graph timed twice varies {min(noise):.2f}-{max(noise):.2f}" if noise else ""
        lines.append(
            f"  whole models in onnxruntime, stock dynamo / fxpool: median {statistics.median(whole):.2f}x "
            f"(from {min(whole):.2f} to {max(whole):.2f}){band}"
        )
    for c in cases:
        if c.status == "fail":
            lines.append(f"  FAIL {c.model} {'x'.join(map(str, c.input_shape))}: {c.reason[:200]}")
    return "\n".join(lines)


def distinct_pool_speeds(cases: Sequence[Any]) -> list[dict[str, Any]]:
    """The pool-level timings of every case, one per distinct pool (the first case's measurement)."""
    seen: dict[str, dict[str, Any]] = {}
    for c in cases:
        for row in getattr(c, "pool_speeds", []):
            seen.setdefault(row["pool"], row | {"case": f"{c.model}@{'x'.join(map(str, c.input_shape[2:]))}"})
    return list(seen.values())


def markdown(cases: Sequence[Any]) -> str:
    tally = counts(cases)
    lines = [
        f"# fxpool zoo sweep\n\n{tally['pass']} pass, {tally['fail']} fail, {tally['skip']} skip\n",
        "| model | input | status | pools | replacements | eager err | exports: TS stock / TS converted / dynamo stock "
        "/ dynamo converted / torch.export converted | PT2: pools replaced (error) | ORT err (ts / dynamo) "
        "| ORT ms (ours / dynamo orig) | speedup "
        "| convert s | convert / forward |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        eager = _fmt(c.eager_max_error) + "".join(
            f"<br>{dtype} {_fmt(error)}" for dtype, error in c.eager_errors.items() if dtype != "float32"
        )
        exports = " / ".join(export_state(getattr(c, attribute, "")) for _, attribute in EXPORTS)
        lines.append(
            f"| {c.model} | {'x'.join(map(str, c.input_shape))} | {c.status} | {c.pools} | "
            f"{', '.join(f'{k} {v}' for k, v in c.replacements.items())} | {eager} | {exports} | {_pt2_cell(c)} | "
            f"{_fmt(c.torchscript_ort_error)} / {_fmt(c.dynamo_ort_error)} | "
            f"{_fmt(c.ort_ms_converted, '.2f')} / {_fmt(c.ort_ms_original_dynamo, '.2f')} | "
            f"{_fmt(c.ort_speedup, '.2f')} | {_fmt(c.convert_s, '.2f')} | {_fmt(_forwards(c), '.1f')} |"
        )
    devices = sorted({f"eager on {c.device}, onnxruntime {c.ort_provider}" for c in cases if c.ort_provider})
    if devices:
        lines += ["", "Ran " + "; ".join(devices) + "."]
    speeds = distinct_pool_speeds(cases)
    if speeds:
        lines += [
            "",
            "## Pools alone in onnxruntime",
            "",
            "| pool (C x spatial -> output) | replacement | fxpool ms | stock dynamo ms | stock / fxpool | first seen in |",
            "|---|---|---|---|---|---|",
        ]
        for row in speeds:
            ratio = row["ort_ms_stock"] / row["ort_ms_fxpool"] if row["ort_ms_stock"] else None
            stock = _fmt(row["ort_ms_stock"], ".3f") if row["ort_ms_stock"] else f"does not export ({row['stock'][:80]})"
            lines.append(
                f"| {row['pool']} | {row['replacement']} | {row['ort_ms_fxpool']:.3f} | {stock} | "
                f"{_fmt(ratio, '.1f')} | {row['case']} |"
            )
    reasons = [
        f"- {c.model} {'x'.join(map(str, c.input_shape))}: {c.status}: {c.reason}"
        + (f" (exporter output: `{c.log}`)" if c.log and c.status == "fail" else "")
        for c in cases
        if c.reason
    ]
    stock_failures = [
        f"- {c.model} {'x'.join(map(str, c.input_shape))}: {label}: {getattr(c, attribute)[len('fails: ') :]}"
        for c in cases
        for label, attribute in EXPORTS
        if "stock" in label and export_state(getattr(c, attribute, "")) == "fails"
    ]
    if reasons:
        lines += ["", "## Notes", *reasons]
    if stock_failures:
        lines += ["", "## Why the stock exporters fail on the originals", *stock_failures]
    return "\n".join(lines) + "\n"


def _pt2_cell(case: Any) -> str:
    """The PT2 stage of a case: replaced/found ATen pools of the converted program and its error, or why not."""
    if getattr(case, "pt2_pools", None) is None:
        return "fails" if getattr(case, "pt2", "") else "-"
    cell = f"{case.pt2_converted}/{case.pt2_pools}"
    return cell + (f" ({_fmt(case.pt2_error)})" if case.pt2_error is not None else "") + ("" if case.pt2 == "ok" else " fails")


def _forwards(case: Any) -> float | None:
    forward = getattr(case, "forward_s", None)
    return case.convert_s / forward if forward and case.convert_s else None


def _fmt(value: float | None, spec: str = ".1e") -> str:
    return "-" if value is None else format(value, spec)


_COLOURS = {"exports": "#4caf50", "decomposed": "#ffb74d", "fails": "#e57373", "not tried": "#e0e0e0"}
_CELL_TEXT = {"exports": "", "decomposed": "GatherND", "fails": "fails", "not tried": "-"}
_SHORT = {
    "stock_torchscript": "TS stock",
    "converted_torchscript": "TS converted",
    "stock_dynamo": "dynamo stock",
    "converted_dynamo": "dynamo converted",
    "converted_torch_export": "torch.export converted",
}
_FACET_ROWS = 40  # models per column of the exportability matrix


def plot(cases: Sequence[Any], path: Path) -> None:
    """Which models export (stock exporters on the original vs fxpool), pool-level speed, whole-model spread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullFormatter

    ran = [c for c in cases if c.status != "skip"]
    if not ran:
        return
    models = list(dict.fromkeys(c.model for c in ran))
    sizes = list(dict.fromkeys("x".join(map(str, c.input_shape[2:])) for c in ran))
    facets = max(1, -(-len(models) // _FACET_ROWS))
    rows_per_facet = -(-len(models) // facets)
    speeds = distinct_pool_speeds(cases)
    columns = [(size, attribute) for size in sizes for _, attribute in EXPORTS]
    height = max(5.0, 0.28 * rows_per_facet + 2.8, 0.22 * len(speeds) + 3.5)
    matrix_width = 1.6 + 0.55 * len(columns)
    figure = plt.figure(figsize=(matrix_width * facets + 9, height))
    grid = figure.add_gridspec(
        2, facets + 1, width_ratios=[matrix_width] * facets + [7.5], height_ratios=[3, 1], hspace=0.6, wspace=0.35
    )
    by_key = {(c.model, "x".join(map(str, c.input_shape[2:]))): c for c in ran}
    for facet in range(facets):
        axis = figure.add_subplot(grid[:, facet])
        shown = models[facet * rows_per_facet : (facet + 1) * rows_per_facet]
        for row, model in enumerate(shown):
            for column, (size, attribute) in enumerate(columns):
                case = by_key.get((model, size))
                if case is None:
                    continue
                state = export_state(getattr(case, attribute, ""))
                axis.add_patch(plt.Rectangle((column, row), 0.92, 0.85, color=_COLOURS[state]))
                axis.text(column + 0.46, row + 0.45, _CELL_TEXT[state], ha="center", va="center", fontsize=6)
        axis.set_xlim(0, len(columns))
        axis.set_ylim(len(shown), -0.9 if len(sizes) > 1 else 0)
        axis.set_yticks([r + 0.42 for r in range(len(shown))], shown, fontsize=8)
        axis.xaxis.tick_top()
        axis.set_xticks([k + 0.46 for k in range(len(columns))], [_SHORT[a] for _, a in columns], rotation=90, fontsize=7)
        for k, size in enumerate(sizes):
            if len(sizes) > 1:
                axis.text(k * len(EXPORTS) + len(EXPORTS) / 2, -0.45, size, ha="center", va="center", fontsize=8)
            if k:
                axis.axvline(k * len(EXPORTS) - 0.04, color="k", lw=0.8)
        axis.tick_params(length=0)
        for side in axis.spines.values():
            side.set_visible(False)
    figure.legend(
        handles=[Patch(color=c, label={"decomposed": "exports, as GatherND/Where"}.get(s, s)) for s, c in _COLOURS.items()],
        loc="lower left",
        fontsize=8,
        ncol=4,
        frameon=False,
    )

    pools_axis = figure.add_subplot(grid[0, facets])
    if speeds:
        speeds.sort(key=lambda row: (row["ort_ms_stock"] or 1e9) / row["ort_ms_fxpool"])
        ratios = [row["ort_ms_stock"] / row["ort_ms_fxpool"] if row["ort_ms_stock"] else None for row in speeds]
        top = max([r for r in ratios if r] or [1.0]) * 2
        for k, ratio in enumerate(ratios):
            if ratio is None:
                pools_axis.plot([top], [k], marker=">", color=_COLOURS["fails"], ms=8)
                pools_axis.annotate(
                    "stock cannot export", (top, k), xytext=(-8, 0), textcoords="offset points", ha="right", va="center", fontsize=7
                )
            else:
                pools_axis.plot([ratio], [k], marker="o", color="tab:blue", ms=5)
                pools_axis.annotate(f"{ratio:.1f}x", (ratio, k), xytext=(6, 0), textcoords="offset points", va="center", fontsize=7)
        pools_axis.set_yticks(range(len(speeds)), [f"{row['pool']}  {row['replacement']}" for row in speeds], fontsize=7)
        pools_axis.set_xscale("log")
        pools_axis.xaxis.set_minor_formatter(NullFormatter())
        pools_axis.set_xlim(min([r for r in ratios if r] or [1.0]) / 2, top * 1.5)
        pools_axis.axvline(1.0, color="k", lw=0.8)
        pools_axis.set_ylim(len(speeds) - 0.5, -0.5)
    pools_axis.set_xlabel("onnxruntime time of the stock dynamo graph / fxpool's graph (log; > 1: fxpool faster)", fontsize=8)
    pools_axis.set_title("Each pool alone (every replacement but a plain mean)", fontsize=11)

    whole_axis = figure.add_subplot(grid[1, facets])
    whole = [c.ort_speedup for c in ran if c.ort_speedup]
    noise = [c.ort_noise for c in ran if c.ort_noise]
    if noise:
        whole_axis.axvspan(
            min(noise), max(noise), color="#bdbdbd", alpha=0.6, label=f"one graph timed twice: {min(noise):.2f}-{max(noise):.2f}"
        )
    if whole:
        whole_axis.plot(
            whole,
            [0.0] * len(whole),
            "o",
            color="tab:blue",
            alpha=0.5,
            ms=6,
            label=f"{len(whole)} models, median {statistics.median(whole):.2f}x",
        )
    whole_axis.axvline(1.0, color="k", lw=0.8)
    whole_axis.set_yticks([])
    if whole or noise:
        whole_axis.legend(fontsize=7, loc="upper left", frameon=False, bbox_to_anchor=(0, -0.45), ncol=2)
    whole_axis.set_xlabel("whole model: stock dynamo graph time / fxpool's graph time", fontsize=8)
    whole_axis.set_title("Whole models (mostly one mean replaced: within noise)", fontsize=10)
    tally = counts(cases)
    figure.suptitle(
        f"fxpool zoo sweep, {len(cases)} cases ({tally['pass']} pass, {tally['fail']} fail, "
        f"{tally['skip']} skip).  Left: does each model export to ONNX, with the stock exporter "
        f"on the original and with fxpool, per input size?",
        fontsize=12,
        x=0.01,
        y=1.1,
        ha="left",
    )
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
