"""fxpool.planning: rule order, reasons, the sliding/slices limits at their boundaries, guarded axes, step order."""

from __future__ import annotations

import itertools

import pytest

from fxpool import planning
from fxpool.planning import (
    SLICES_MAX_WINDOWS,
    SLIDING_MAX_LENGTH,
    SlidingWindowStep,
    WindowSlicesStep,
    choose_axis,
    choose_plan,
)


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


def test_guarded_axes() -> None:
    assert choose_plan("avg", (10, 10), (1, 1)).guarded_axes == ()  # means: size-agnostic
    assert choose_plan("avg", (10, 10), (7, 10), (False, True)).guarded_axes == (0,)
    assert choose_plan("avg", (10, 14), (1, 7)).guarded_axes == (0, 1)  # the output-1 axis is folded in the pool
    assert choose_plan("avg", (10, 10), (5, 5), scaled_output=True).guarded_axes == (0, 1)


def test_upsampling_is_the_last_step() -> None:
    for family in ("avg", "max"):
        for ins in itertools.product((1, 4, 7, 10, 33), repeat=2):
            for outs in itertools.product((1, 3, 6, 7, 20), repeat=2):
                plan = choose_plan(family, ins, outs)  # type: ignore[arg-type]
                kinds = [type(step).__name__ for step in plan.steps]
                assert "UpsampleStep" not in kinds[:-1]


def test_kind_names_the_first_op() -> None:
    assert choose_plan("avg", (7, 7), (3, 3)).kind == "AvgPool2d"
    assert choose_plan("avg", (10, 10), (7, 7)).kind == "sliding"
    assert choose_plan("avg", (64, 64), (6, 6)).kind == "slices"
    assert choose_plan("max", (10, 10), (7, 7)).kind == "gather"
    assert choose_plan("max", (10, 10), (1, 1)).kind == "amax"
    assert choose_plan("avg", (5, 5), (5, 5)).kind == "identity"
    assert choose_plan("avg", (4, 4), (8, 8)).kind == "nearest"


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="sizes >= 1"):
        choose_axis("avg", 0, 3)
    with pytest.raises(ValueError, match="family"):
        choose_plan("sum", (3,), (2,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="follows_input"):
        choose_plan("avg", (3, 3), (2, 2), (True,))
    assert planning.axis_names(3) == ("D", "H", "W")


def test_an_axis_keeps_why_the_earlier_rules_did_not_apply() -> None:
    assert choose_axis("avg", 10, 7).rejected == (
        "identity: output differs from input",
        "reduce: output is not 1",
        "pool: windows of lengths (2, 3) or uneven starts",
        "upsample: output is not an integer multiple of the input",
    )
    assert choose_axis("avg", 7, 7).rejected == ()
    assert [r.split(":")[0] for r in choose_axis("max", 7, 3).rejected] == ["identity", "reduce"]


def _sighting(**overrides: object) -> planning.PoolSighting:
    fields: dict[str, object] = {"family": "avg", "runs": (((10, 10), (7, 7)),), "requested": (7, 7)}
    fields.update(overrides)
    return planning.PoolSighting(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overrides,reason",
    [
        ({"runs": ()}, "never ran"),
        ({"dynamic_output_size": True, "requested": None}, "computed at run time"),
        ({"quantized": True}, "quantized input"),
        ({"runs": (((0, 10), (7, 7)),)}, "zero spatial size"),
        ({"runs": (((10, 10), (7, 7)), ((12, 12), (7, 7)))}, "different sizes ((10, 10)->(7, 7), (12, 12)->(7, 7))"),
    ],
)
def test_each_guard_leaves_its_pool_to_pytorch_and_says_why(overrides: dict, reason: str) -> None:
    decision = planning.decide_pool(_sighting(**overrides))
    assert decision.action == "left" and decision.plan is None and reason in decision.reason


def test_guards_run_in_their_order() -> None:
    # never ran beats everything; a quantized input is left even where it asks for indices
    both = _sighting(return_indices=True, quantized=True)
    assert "quantized input" in planning.decide_pool(both).reason
    assert "never ran" in planning.decide_pool(_sighting(runs=(), return_indices=True)).reason
    assert [g.__name__ for g in planning.POOL_GUARDS][:2] == ["_ran_guard", "_constant_output_guard"]


def test_a_max_pool_returning_indices_takes_the_window_argmax_form_at_one_size_only() -> None:
    one = planning.decide_pool(_sighting(family="max", return_indices=True))
    assert one.action == "exact" and one.returns_indices and "first maximum on ties, last NaN" in one.reason
    several = planning.decide_pool(_sighting(family="max", return_indices=True, runs=(((10, 10), (7, 7)), ((12, 12), (7, 7)))))
    assert several.action == "left" and several.reason.startswith("return_indices=True and called 2 times")
    dynamic = planning.decide_pool(_sighting(family="max", return_indices=True), dynamic=True)
    assert dynamic.action == "left" and "dynamic=True and return_indices=True" in dynamic.reason


def test_a_pool_called_twice_at_one_size_is_planned_once() -> None:
    twice = _sighting(runs=(((10, 10), (7, 7)),) * 2)
    decision = planning.decide_pool(twice)
    assert decision.action == "exact" and decision.plan == choose_plan("avg", (10, 10), (7, 7))
    assert decision.reason == decision.plan.reasons()


def test_dynamic_takes_only_size_dependent_pools() -> None:
    general = planning.decide_pool(_sighting(), dynamic=True)
    assert general.action == "dynamic" and general.reason.startswith("dynamic=True; at the traced size: H 10->7")
    mean = planning.decide_pool(_sighting(runs=(((10, 9), (1, 9)),), requested=(1, None)), dynamic=True)
    assert mean.action == "exact" and mean.plan is not None and mean.plan.size_agnostic


def test_dynamic_refuses_a_scale_factor() -> None:
    scaled = _sighting(runs=(((4, 4), (8, 8)),), requested=None)
    assert planning.decide_pool(scaled).action == "exact"  # at the traced size it is an exact upsample
    decision = planning.decide_pool(scaled, dynamic=True)
    assert decision.action == "left" and "scale_factor" in decision.reason


def test_none_in_the_request_follows_the_input() -> None:
    decision = planning.decide_pool(_sighting(runs=(((10, 9), (7, 9)),), requested=(7, None)))
    assert decision.plan is not None and decision.plan.axes[1].follows_input
    assert decision.plan.guarded_axes == (0,)


def test_a_decision_has_a_plan_exactly_when_it_replaces() -> None:
    plan = choose_plan("avg", (10,), (7,))
    with pytest.raises(ValueError, match="has no plan"):
        planning.PoolDecision("left", "why", plan)
    with pytest.raises(ValueError, match="needs a plan"):
        planning.PoolDecision("exact", "why")
    with pytest.raises(ValueError, match="unknown decision"):
        planning.PoolDecision("maybe", "why", plan)  # type: ignore[arg-type]
