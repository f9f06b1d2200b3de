"""The zoo sweep's reports: ``report.json`` (one record per case), ``report.md`` and ``speedup.png``."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

STATUSES = ("pass", "fail", "skip")


def write_reports(cases: Sequence[Any], folder: Path, picture: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps([asdict(c) for c in cases], indent=2))
    (folder / "report.md").write_text(markdown(cases))
    if not picture:
        return
    try:
        plot(cases, folder / "speedup.png")
    except ImportError:  # matplotlib is optional
        pass


def first_line(error: BaseException) -> str:
    """The first line of an error's message, without the terminal colours torch.onnx adds, for a report."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:160]


def counts(cases: Sequence[Any]) -> dict[str, int]:
    return {s: sum(c.status == s for c in cases) for s in STATUSES}


def markdown(cases: Sequence[Any]) -> str:
    tally = counts(cases)
    lines = [f"# fxpool zoo sweep\n\n{tally['pass']} pass, {tally['fail']} fail, {tally['skip']} skip\n",
             "| model | input | status | pools | replacements | eager err | stock TorchScript | ORT err (ts / dynamo) "
             "| ORT ms (ours / dynamo orig) | speedup | convert s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        eager = _fmt(c.eager_max_error) + "".join(
            f"<br>{dtype} {_fmt(error)}" for dtype, error in c.eager_errors.items() if dtype != "float32")
        lines.append(
            f"| {c.model} | {'x'.join(map(str, c.input_shape))} | {c.status} | {c.pools} | "
            f"{', '.join(f'{k} {v}' for k, v in c.replacements.items())} | {eager} | "
            f"{c.stock_torchscript[:60]} | {_fmt(c.torchscript_ort_error)} / {_fmt(c.dynamo_ort_error)} | "
            f"{_fmt(c.ort_ms_converted, '.2f')} / {_fmt(c.ort_ms_original_dynamo, '.2f')} | "
            f"{_fmt(c.ort_speedup, '.2f')} | {_fmt(c.convert_s, '.2f')} |")
    devices = sorted({f"eager on {c.device}, onnxruntime {c.ort_provider}" for c in cases if c.ort_provider})
    if devices:
        lines += ["", "Ran " + "; ".join(devices) + "."]
    reasons = [f"- {c.model} {'x'.join(map(str, c.input_shape))}: {c.status}: {c.reason}" for c in cases if c.reason]
    if reasons:
        lines += ["", "## Notes", *reasons]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None, spec: str = ".1e") -> str:
    return "-" if value is None else format(value, spec)


def plot(cases: Sequence[Any], path: Path) -> None:
    """Per case: onnxruntime speedup over the dynamo export of the original, and the eager error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cases if c.status == "pass" and c.eager_max_error is not None]
    if not shown:
        return
    labels = [f"{c.model}@{'x'.join(map(str, c.input_shape[2:]))}" for c in shown]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, max(3, 0.3 * len(shown))), sharey=True)
    speedups = [c.ort_speedup or 0.0 for c in shown]
    left.barh(labels, speedups, color=["tab:green" if s >= 1 else "tab:orange" for s in speedups])
    left.axvline(1.0, color="k", lw=0.8)
    left.set_xlabel("onnxruntime: dynamo graph of the original / fxpool graph (x; 0 = original not exportable)")
    right.barh(labels, [max(c.eager_max_error, 1e-12) for c in shown], color="tab:blue")
    right.set_xscale("log")
    right.set_xlabel("eager max |converted - original| (float32)")
    left.invert_yaxis()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
