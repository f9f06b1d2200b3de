"""fxpool.guards: each guard leaves its pool with why, in their order; the one decision per pool (exact,
dynamic, the window argmax form, left) and what a decision must hold."""

from __future__ import annotations

import pytest

from fxpool import guards
from fxpool.planning import choose_plan


def _sighting(**overrides: object) -> guards.PoolSighting:
    fields: dict[str, object] = {"family": "avg", "runs": (((10, 10), (7, 7)),), "requested": (7, 7)}
    fields.update(overrides)
    return guards.PoolSighting(**fields)  # type: ignore[arg-type]


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
    decision = guards.decide_pool(_sighting(**overrides))
    assert decision.action == "left" and decision.plan is None and reason in decision.reason


def test_guards_run_in_their_order() -> None:
    # never ran beats everything; a quantized input is left even where it asks for indices
    both = _sighting(return_indices=True, quantized=True)
    assert "quantized input" in guards.decide_pool(both).reason
    assert "never ran" in guards.decide_pool(_sighting(runs=(), return_indices=True)).reason
    assert [g.__name__ for g in guards.POOL_GUARDS][:2] == ["_ran_guard", "_constant_output_guard"]


def test_a_max_pool_returning_indices_takes_the_window_argmax_form_at_one_size_only() -> None:
    one = guards.decide_pool(_sighting(family="max", return_indices=True))
    assert one.action == "exact" and one.returns_indices and "first maximum on ties, last NaN" in one.reason
    several = guards.decide_pool(_sighting(family="max", return_indices=True, runs=(((10, 10), (7, 7)), ((12, 12), (7, 7)))))
    assert several.action == "left" and several.reason.startswith("return_indices=True and called 2 times")
    dynamic = guards.decide_pool(_sighting(family="max", return_indices=True), dynamic=True)
    assert dynamic.action == "left" and "dynamic=True and return_indices=True" in dynamic.reason


def test_a_pool_called_twice_at_one_size_is_planned_once() -> None:
    twice = _sighting(runs=(((10, 10), (7, 7)),) * 2)
    decision = guards.decide_pool(twice)
    assert decision.action == "exact" and decision.plan == choose_plan("avg", (10, 10), (7, 7))
    assert decision.reason == decision.plan.reasons()


def test_dynamic_takes_only_size_dependent_pools() -> None:
    general = guards.decide_pool(_sighting(), dynamic=True)
    assert general.action == "dynamic" and general.reason.startswith("dynamic=True; at the traced size: H 10->7")
    mean = guards.decide_pool(_sighting(runs=(((10, 9), (1, 9)),), requested=(1, None)), dynamic=True)
    assert mean.action == "exact" and mean.plan is not None and mean.plan.size_agnostic


def test_dynamic_refuses_a_scale_factor() -> None:
    scaled = _sighting(runs=(((4, 4), (8, 8)),), requested=None)
    assert guards.decide_pool(scaled).action == "exact"  # at the traced size it is an exact upsample
    decision = guards.decide_pool(scaled, dynamic=True)
    assert decision.action == "left" and "scale_factor" in decision.reason


def test_none_in_the_request_follows_the_input() -> None:
    decision = guards.decide_pool(_sighting(runs=(((10, 9), (7, 9)),), requested=(7, None)))
    assert decision.plan is not None and decision.plan.axes[1].follows_input
    assert decision.plan.guarded_axes == (0,)


def test_a_decision_has_a_plan_exactly_when_it_replaces() -> None:
    plan = choose_plan("avg", (10,), (7,))
    with pytest.raises(ValueError, match="has no plan"):
        guards.PoolDecision("left", "why", plan)
    with pytest.raises(ValueError, match="needs a plan"):
        guards.PoolDecision("exact", "why")
    with pytest.raises(ValueError, match="unknown decision"):
        guards.PoolDecision("maybe", "why", plan)  # type: ignore[arg-type]
