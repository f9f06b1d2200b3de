"""fxpool.planning: rule order, reasons, the sliding/slices limits at their boundaries, step order."""

from __future__ import annotations

import itertools

import pytest

from fxpool import planning, steps
from fxpool.planning import SLICES_MAX_WINDOWS, SLIDING_MAX_LENGTH, choose_axis, choose_plan
from fxpool.steps import SlidingWindowStep, WindowSlicesStep


@pytest.mark.parametrize(
    "family,in_size,out_size,kind",
    [
        ("avg", 7, 7, "identity"),
        ("avg", 7, 1, "reduce"),
        ("avg", 7, 3, "pool"),
        ("avg", 4, 8, "upsample"),
        ("avg", 10, 7, "sliding"),
        ("avg", 64, 6, "slices"),
        ("max", 10, 7, "gather"),
        ("avg", 1000, 969, "sliding"),
        ("avg", 2000, 150, "gather"),
        ("max", 1, 1, "identity"),  # identity comes before reduce
        ("avg", 3, 6, "upsample"),
        ("avg", 4, 6, "sliding"),
    ],
)
def test_first_rule_that_applies_wins(family: str, in_size: int, out_size: int, kind: str) -> None:
    assert choose_axis(family, in_size, out_size).kind == kind  # type: ignore[arg-type]


def test_none_output_follows_the_input() -> None:
    axis = choose_axis("avg", 9, 9, follows_input=True)
    assert axis.kind == "identity" and axis.follows_input and "None" in axis.reason


def test_every_axis_says_why_in_the_plan() -> None:
    plan = choose_plan("avg", (10, 7), (7, 3))
    assert plan.reasons() == (
        "H 10->7: windows of lengths (2, 3), a stride-1 AvgPool per length, then the starts gathered; "
        "W 7->3: uniform windows k=3 s=2"
    )


def test_sliding_and_slices_limits_at_their_boundaries() -> None:
    # the longest window decides sliding; the number of windows decides slices against gather
    assert choose_axis("avg", 11, 4).kind == "sliding" and max(planning.window_lengths(11, 4)) == SLIDING_MAX_LENGTH
    assert choose_axis("avg", 15, 4).kind == "slices" and max(planning.window_lengths(15, 4)) == SLIDING_MAX_LENGTH + 1
    assert choose_axis("avg", 6, 17).kind == "sliding"  # up-sampling: windows of one and two entries
    assert choose_axis("avg", 10, 7, spatial_dims=3).kind == "slices"  # onnxruntime's 3d AveragePool is slow
    long_windows = SLICES_MAX_WINDOWS * 10 - 1  # windows of 10 entries, not a uniform stride
    assert choose_axis("avg", long_windows, SLICES_MAX_WINDOWS).kind == "slices"
    assert choose_axis("avg", long_windows + 10, SLICES_MAX_WINDOWS + 1).kind == "gather"
    assert choose_axis("max", 28, 5).kind == "gather"  # the max family always gathers


def test_general_axes_run_most_shrinking_first_after_the_pooling() -> None:
    steps = choose_plan("avg", (10, 64), (7, 6)).steps
    assert [type(s) for s in steps] == [WindowSlicesStep, SlidingWindowStep]  # 64->6 shrinks more than 10->7
    assert choose_plan("avg", (100, 60), (6, 6)).describe() == "AvgPool2d(k=(1, 10), s=(1, 10)) -> slices H 100->6"


def test_upsampling_is_the_last_step() -> None:
    for family in ("avg", "max"):
        for ins in itertools.product((1, 4, 7, 10, 33), repeat=2):
            for outs in itertools.product((1, 3, 6, 7, 20), repeat=2):
                plan = choose_plan(family, ins, outs)  # type: ignore[arg-type]
                kinds = [type(step).__name__ for step in plan.steps]
                assert "UpsampleStep" not in kinds[:-1]


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="sizes >= 1"):
        choose_axis("avg", 0, 3)
    with pytest.raises(ValueError, match="family"):
        choose_plan("sum", (3,), (2,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="follows_input"):
        choose_plan("avg", (3, 3), (2, 2), (True,))
    assert steps.axis_names(3) == ("D", "H", "W")


def test_an_axis_keeps_why_the_earlier_rules_did_not_apply() -> None:
    assert choose_axis("avg", 10, 7).rejected == (
        "identity: output differs from input",
        "reduce: output is not 1",
        "pool: windows of lengths (2, 3) or uneven starts",
        "upsample: output is not an integer multiple of the input",
    )
    assert choose_axis("avg", 7, 7).rejected == ()
    assert [r.split(":")[0] for r in choose_axis("max", 7, 3).rejected] == ["identity", "reduce"]
