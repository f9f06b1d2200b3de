"""fxpool.steps: what a plan says of itself (the axes its replacement guards, the kind reports count, how
it reads), on plans :func:`fxpool.planning.choose_plan` makes."""

from __future__ import annotations

from fxpool.planning import choose_plan
from fxpool.steps import PoolPlan, axis_names


def test_guarded_axes() -> None:
    assert choose_plan("avg", (10, 10), (1, 1)).guarded_axes == ()  # means: size-agnostic
    assert choose_plan("avg", (10, 10), (7, 10), (False, True)).guarded_axes == (0,)
    assert choose_plan("avg", (10, 14), (1, 7)).guarded_axes == (0, 1)  # the output-1 axis is folded in the pool
    assert choose_plan("avg", (10, 10), (5, 5), scaled_output=True).guarded_axes == (0, 1)


def test_kind_names_the_first_op() -> None:
    assert choose_plan("avg", (7, 7), (3, 3)).kind == "AvgPool2d"
    assert choose_plan("avg", (10, 10), (7, 7)).kind == "sliding"
    assert choose_plan("avg", (64, 64), (6, 6)).kind == "slices"
    assert choose_plan("max", (10, 10), (7, 7)).kind == "gather"
    assert choose_plan("max", (10, 10), (1, 1)).kind == "amax"
    assert choose_plan("avg", (5, 5), (5, 5)).kind == "identity"
    assert choose_plan("avg", (4, 4), (8, 8)).kind == "nearest"


def test_a_plan_reads_as_its_steps_and_names_its_axes() -> None:
    plan = choose_plan("avg", (10, 64), (7, 6))
    assert isinstance(plan, PoolPlan) and plan.spatial_dims == 2 and plan.out_sizes == (7, 6)
    assert plan.describe().startswith("slices W 64->6") and "sliding H 10->7" in plan.describe()
    assert axis_names(1) == ("L",) and axis_names(2) == ("H", "W") and axis_names(3) == ("D", "H", "W")
