"""The zoo sweep's reports: ``report.json`` (one record per case), ``report.md`` (a compatibility table per
model, then every case), ``compatibility.csv``, the figure (``zoo.svg``, ``zoo.png``: :mod:`model_zoo_checks.figure`)
and the console summary.

:func:`stages` reads a case as the stages a user cares about — did it convert, does the converted model
export with each exporter, does its torch.export program convert as a program, does onnxruntime agree —
each one of :data:`STATES`; the table, the CSV and the figure all show those. "runs" is the worker's own
stage: the model built and ran, and its process was not stopped (a crash, a limit).
"""

from __future__ import annotations

import csv
import io
import json
import os
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
PICTURES = ("zoo.svg", "zoo.png")
# The stages of a case, as the compatibility table and the figure show them: (label, how to read it).
STAGES = ("runs", "convert", "TorchScript ONNX", "dynamo ONNX", "torch.export", "PT2 program", "onnxruntime")
STATES = ("holds", "fails", "the original fails too", "not tried", "skipped")
MARKS = {"holds": "✓", "fails": "✗", "the original fails too": "○", "not tried": "–", "skipped": "skip"}
_EXPORT_STAGES = {
    "TorchScript ONNX": "converted_torchscript",
    "dynamo ONNX": "converted_dynamo",
    "torch.export": "converted_torch_export",
}


def write_reports(cases: Sequence[Any], folder: Path, picture: bool = True) -> None:
    """report.json, report.md and compatibility.csv (each replaced whole: a reader never sees half a file),
    and with ``picture`` the figure."""
    folder.mkdir(parents=True, exist_ok=True)
    _replace(folder / "report.json", json.dumps([asdict(c) for c in cases], indent=1))
    _replace(folder / "report.md", markdown(cases))
    _replace(folder / "compatibility.csv", compatibility_csv(cases))
    if not picture:
        return
    try:
        from .figure import plot
    except ImportError:  # matplotlib is optional
        return
    plot(cases, [folder / name for name in PICTURES])


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def read_field(case: Any, name: str, default: Any = None) -> Any:
    """A field of a case object or of its JSON record (the docs' kept reports are dicts)."""
    return case.get(name, default) if isinstance(case, dict) else getattr(case, name, default)


def stages(case: Any) -> dict[str, str]:
    """Each stage of :data:`STAGES` for one case, as one of :data:`STATES`."""
    if read_field(case, "status") == "skip":
        return dict.fromkeys(STAGES, "skipped")
    runs = not read_field(case, "stopped") and not (read_field(case, "reason", "") or "").startswith("the model cannot be built")
    found = {"runs": "holds" if runs else "fails", "convert": _convert_state(case) if runs else "not tried"}
    for stage, attribute in _EXPORT_STAGES.items():
        text = read_field(case, attribute, "") or ""
        alike = "(the original alike)" in text or "(the original neither)" in text
        if stage == "TorchScript ONNX" and text.startswith("fails") and text == read_field(case, "stock_torchscript", ""):
            alike = True
        found[stage] = (
            "not tried" if not text else "holds" if text.startswith("ok") else "the original fails too" if alike else "fails"
        )
    program = read_field(case, "pt2", "") or ""
    if program:
        found["PT2 program"] = "holds" if program == "ok" else "fails"
    else:
        not_tried = "PT2 not tried" in (read_field(case, "reason", "") or "")  # the original does not torch.export
        found["PT2 program"] = "the original fails too" if not_tried else "not tried"
    onnx = [read_field(case, a, "") or "" for a in ("converted_torchscript", "converted_dynamo")]
    verified = [read_field(case, e) for e in ("torchscript_ort_error", "dynamo_ort_error")]
    if any(text == "fails: not verified" for text in onnx):
        found["onnxruntime"] = "fails"
    else:
        found["onnxruntime"] = "holds" if any(e is not None for e in verified) else "not tried"
    return found


def _convert_state(case: Any) -> str:
    recorded = read_field(case, "convert", "") or ""
    if recorded:
        return "holds" if recorded == "ok" else "fails"
    if read_field(case, "status") == "fail":
        return "fails"
    return "holds" if read_field(case, "eager_max_error") is not None else "not tried"  # a report from before the field


def by_model(cases: Sequence[Any]) -> dict[str, list[Any]]:
    """The cases of each model, in the order they come."""
    grouped: dict[str, list[Any]] = {}
    for case in cases:
        grouped.setdefault(read_field(case, "model"), []).append(case)
    return grouped


def model_stage(group: Sequence[Any], stage: str) -> str:
    """One state for a model's stage over its cases: the worst one (fails before the original failing, before holds)."""
    states = [stages(c)[stage] for c in group]
    for state in ("fails", "the original fails too", "holds", "not tried"):
        if state in states:
            return state
    return "skipped"


def compatibility_rows(cases: Sequence[Any]) -> list[tuple[str, ...]]:
    """Per model: suite, input sizes, verdicts, one mark per stage (per size where the sizes differ), and why."""
    rows = []
    for model, group in by_model(cases).items():
        marks = []
        for stage in STAGES:
            per_case = [MARKS[stages(c)[stage]] for c in group]
            marks.append(per_case[0] if len(set(per_case)) == 1 else " / ".join(per_case))
        verdicts = [read_field(c, "status") for c in group]
        result = verdicts[0] if len(set(verdicts)) == 1 else " / ".join(verdicts)
        why = "; ".join(
            dict.fromkeys(
                f"{_shape(c)}: {read_field(c, 'reason')}" if len(group) > 1 else read_field(c, "reason")
                for c in group
                if read_field(c, "reason") and read_field(c, "status") != "pass"
            )
        )
        rows.append((model, read_field(group[0], "suite", ""), ", ".join(_shape(c) for c in group), result, *marks, why))
    return rows


COMPATIBILITY_HEADER = ("model", "suite", "input", "result", *STAGES, "why (failures and skips)")


def _shape(case: Any) -> str:
    spatial = list(read_field(case, "input_shape"))[2:]
    return str(spatial[0]) if len(spatial) == 2 and spatial[0] == spatial[1] else "x".join(map(str, spatial))


def compatibility_csv(cases: Sequence[Any]) -> str:
    """One row per case: the model, its input shape, the verdict, each stage's state and the reason."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["model", "suite", "input_shape", "status", *STAGES, "stopped", "reason"])
    for case in cases:
        state = stages(case)
        shape = "x".join(map(str, read_field(case, "input_shape")))
        writer.writerow(
            [read_field(case, "model"), read_field(case, "suite", ""), shape, read_field(case, "status")]
            + [state[stage] for stage in STAGES]
            + [read_field(case, "stopped", "") or "", read_field(case, "reason", "") or ""]
        )
    return out.getvalue()


# What two runs of the same case may differ in: times, memory, where it ran, log paths and tracebacks.
MEASURED = frozenset(
    {
        "seconds",
        "convert_s",
        "forward_s",
        "ort_ms_converted",
        "ort_ms_original_dynamo",
        "ort_speedup",
        "ort_noise",
        "pool_speeds",
        "details",
        "log",
        "peak_memory_mb",
        "cpu_seconds",
        "worker_seconds",
        "host",
    }
)


def differences(first: Sequence[Any], second: Sequence[Any]) -> list[str]:
    """How two sweeps' cases differ, measurements left out (:data:`MEASURED`): one line per case that differs."""

    def keyed(cases: Sequence[Any]) -> dict[tuple[str, tuple[int, ...]], dict[str, Any]]:
        return {(c.model, tuple(c.input_shape)): {k: v for k, v in asdict(c).items() if k not in MEASURED} for c in cases}

    a, b = keyed(first), keyed(second)
    lines = []
    for key in [*a, *(k for k in b if k not in a)]:
        label = f"{key[0]} {'x'.join(map(str, key[1]))}"
        if key not in b or key not in a:
            lines.append(f"{label}: only in the {'first' if key in a else 'second'}")
            continue
        fields = [f"{name} {a[key][name]!r} != {b[key].get(name)!r}" for name in a[key] if a[key][name] != b[key].get(name)]
        if fields:
            lines.append(f"{label}: " + "; ".join(fields))
    return lines


def counts(cases: Sequence[Any]) -> dict[str, int]:
    return {s: sum(read_field(c, "status") == s for c in cases) for s in STATUSES}


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


def compatibility_markdown(cases: Sequence[Any]) -> list[str]:
    """The compatibility table: one row per model, searchable by name, suite or reason."""
    legend = ", ".join(f"{mark} {state}" for state, mark in MARKS.items())
    body = [
        (row[0], *(cell.replace("|", "/") for cell in row[1:-1]), row[-1][:300].replace("|", "/"))
        for row in compatibility_rows(cases)
    ]
    return [
        f"Stages: {legend} (the stock exporter or torch.export fails on the original at an op that is not a pool).",
        "",
        "| " + " | ".join(COMPATIBILITY_HEADER) + " |",
        "|" + "---|" * len(COMPATIBILITY_HEADER),
        *("| " + " | ".join(row) + " |" for row in body),
    ]


def markdown(cases: Sequence[Any]) -> str:
    tally = counts(cases)
    lines = [
        f"# fxpool zoo sweep\n\n{tally['pass']} pass, {tally['fail']} fail, {tally['skip']} skip\n",
        "## Compatibility, per model\n",
        *compatibility_markdown(cases),
        "",
        "## Every case\n",
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
