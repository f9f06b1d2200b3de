"""The zoo's figure: a matrix of models x stages, each cell coloured by what the stage did for that model.

One row per model that ran (the worst of its cases, as :func:`model_zoo_checks.reporting.model_stage`
reads them), one column per stage of :data:`model_zoo_checks.reporting.STAGES`; models are laid out in
facets of :data:`FACET_ROWS`, several facets to a row of the figure. The models reported without running
(no adaptive pool, a known limitation) are counted in the title, not drawn. The sweep writes it as SVG
(for the docs) and PNG (beside the report); ``tables keep --figure`` draws it for a docs page from the
cases it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .reporting import STAGES, STATES, by_model, counts, model_stage, read_field

COLOURS = {
    "holds": "#43a047",
    "fails": "#e53935",
    "the original fails too": "#90a4ae",
    "not tried": "#eceff1",
    "skipped": "#ffffff",
}
FACET_ROWS = 50  # models per facet at most
FACETS_PER_ROW = 5
ROW_INCHES = 0.16
LABELS_INCHES = 1.25
TITLE_INCHES = 0.35
assert set(COLOURS) == set(STATES)


def plot(cases: Sequence[Any], paths: Sequence[Path]) -> None:
    """Draw the matrix of the cases that ran and save it to each of ``paths`` (the format from the suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = by_model(cases)
    ran = {model: group for model, group in groups.items() if any(read_field(c, "status") != "skip" for c in group)}
    count = max(1, -(-len(ran) // FACET_ROWS))
    per_facet = max(1, -(-len(ran) // count))  # facets of even length: 51 models are 26 and 25, not 50 and 1
    facets = [list(ran)[k : k + per_facet] for k in range(0, len(ran), per_facet)] or [[]]
    rows_of_facets = -(-len(facets) // FACETS_PER_ROW)
    across = min(len(facets), FACETS_PER_ROW)
    tallest = max(len(facet) for facet in facets + [[""] * 4])
    matrix = ROW_INCHES * tallest  # inches of one facet's cells; the stage names above them take LABELS_INCHES
    height = rows_of_facets * (matrix + LABELS_INCHES) + TITLE_INCHES
    figure, axes = plt.subplots(
        rows_of_facets,
        across,
        figsize=(3.6 * across + 0.4, height),
        squeeze=False,
        gridspec_kw={"wspace": 1.6, "hspace": LABELS_INCHES / matrix},
    )
    figure.subplots_adjust(top=1 - (TITLE_INCHES + LABELS_INCHES) / height, bottom=0.02)
    for index, axis in enumerate(axes.flat):
        if index >= len(facets):
            axis.set_visible(False)
            continue
        shown = facets[index]
        for row, model in enumerate(shown):
            for column, stage in enumerate(STAGES):
                state = model_stage(ran[model], stage)
                axis.add_patch(plt.Rectangle((column, row), 0.94, 0.88, color=COLOURS[state], lw=0))
        axis.set_xlim(0, len(STAGES))
        axis.set_ylim(max(tallest, len(shown)), 0)
        axis.set_yticks([r + 0.44 for r in range(len(shown))], [_short(m) for m in shown], fontsize=6.5)
        axis.xaxis.tick_top()
        axis.set_xticks([k + 0.47 for k in range(len(STAGES))], STAGES, rotation=90, fontsize=7.5)
        axis.tick_params(length=0)
        for side in axis.spines.values():
            side.set_visible(False)
    tally = counts(cases)
    not_run = len(groups) - len(ran)
    figure.suptitle(
        f"fxpool zoo: {len(ran)} models ran ({len(cases)} cases: {tally['pass']} pass, {tally['fail']} fail, "
        f"{tally['skip']} skip)" + (f"; {not_run} more reported without running" if not_run else ""),
        fontsize=10,
        x=0.01,
        ha="left",
        y=1 - 0.1 / height,
        va="top",
    )
    figure.legend(
        handles=[Patch(facecolor=COLOURS[s], edgecolor="#b0bec5", label=s) for s in STATES if s != "skipped"],
        loc="upper left",
        ncol=4,
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.01, 0.0),
    )
    for path in paths:
        figure.savefig(path, dpi=90, bbox_inches="tight", metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(figure)


def _short(model: str, width: int = 34) -> str:
    return model if len(model) <= width else model[: width - 1] + "…"
