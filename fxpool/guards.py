"""Whether an adaptive pool is replaced at all, and the one :class:`PoolDecision` per pool (no torch, no ONNX).

A pool run at several sizes keeps a plan only where that plan is exact at every size (a mean over output-1 axes:
MONAI's QuickNAT shares one among all its blocks), or takes the dynamic-size form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from .planning import DynamicForm, choose_dynamic_form, choose_plan
from .steps import PoolFamily, PoolPlan

DecisionAction = Literal["exact", "dynamic", "left"]


@dataclass(frozen=True)
class PoolSighting:
    """What is known of one pool before planning: how it is written, and the sizes of each run."""

    family: PoolFamily
    runs: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (spatial input sizes, spatial output sizes) per call
    requested: tuple[int | None, ...] | None  # per spatial axis (None: keep the input's size); None: a scale_factor
    return_indices: bool = False
    dynamic_output_size: bool = False  # output_size is computed in the graph
    quantized: bool = False


PoolGuard = Callable[[PoolSighting], str | None]  # why the pool must be left to PyTorch, or None


def _ran_guard(sighting: PoolSighting) -> str | None:
    return None if sighting.runs else "never ran on the example input, so its input size is unknown"


def _constant_output_guard(sighting: PoolSighting) -> str | None:
    return "output_size is computed at run time, so no fixed replacement is safe" if sighting.dynamic_output_size else None


def _quantized_guard(sighting: PoolSighting) -> str | None:
    return "quantized input: left to the quantized kernel" if sighting.quantized else None


def _non_empty_guard(sighting: PoolSighting) -> str | None:
    in_sizes, out_sizes = sighting.runs[0]
    return "a zero spatial size makes an empty result; nothing to replace" if 0 in in_sizes or 0 in out_sizes else None


def _one_size_guard(sighting: PoolSighting) -> str | None:
    sizes = set(sighting.runs)
    if len(sizes) > 1:
        seen = ", ".join(f"{i}->{o}" for i, o in sorted(sizes))
        return f"called {len(sighting.runs)} times with different sizes ({seen}); no single replacement is exact"
    return None


def _fixed_request_guard(sighting: PoolSighting) -> str | None:
    return "dynamic=True: interpolate with scale_factor has a size-dependent output size" if sighting.requested is None else None


POOL_GUARDS: tuple[PoolGuard, ...] = (_ran_guard, _constant_output_guard, _quantized_guard, _non_empty_guard)
DYNAMIC_GUARDS: tuple[PoolGuard, ...] = (_fixed_request_guard,)


@dataclass(frozen=True)
class PoolDecision:
    """What convert does with one pool, and why: ``exact``, replace it by ``plan``; ``dynamic``, by ``dynamic_form``,
    which computes its windows from the runtime size (``plan``: what the traced size alone would have got);
    ``left``, leave it to PyTorch."""

    action: DecisionAction
    reason: str
    plan: PoolPlan | None = None
    dynamic_form: DynamicForm | None = None
    returns_indices: bool = False  # the window argmax form: values and PyTorch's indices (``plan`` gives the sizes)

    def __post_init__(self) -> None:
        if self.action not in get_args(DecisionAction):
            raise ValueError(f"unknown decision {self.action!r}")
        if (self.plan is None) != (self.action == "left"):
            raise ValueError(f"a {self.action!r} decision {'has no' if self.action == 'left' else 'needs a'} plan")
        if (self.dynamic_form is None) == (self.action == "dynamic"):
            raise ValueError(f"a {self.action!r} decision {'needs a' if self.action == 'dynamic' else 'has no'} dynamic form")


def decide_pool(sighting: PoolSighting, dynamic: bool = False) -> PoolDecision:
    """The one decision for a pool: the first guard that refuses it, else its plan (or the dynamic form).

    >>> decide_pool(PoolSighting("avg", (((7, 7), (3, 3)),), (3, 3))).plan.describe()
    'AvgPool2d(k=(3, 3), s=(2, 2))'
    >>> decide_pool(PoolSighting("max", (((7,), (3,)), ((8,), (3,))), (3,))).reason
    'called 2 times with different sizes ((7,)->(3,), (8,)->(3,)); no single replacement is exact'
    """
    for guard in POOL_GUARDS:
        why = guard(sighting)
        if why:
            return PoolDecision("left", why)
    in_sizes, out_sizes = sighting.runs[0]
    follows = tuple(s is None for s in sighting.requested) if sighting.requested else None
    plan = choose_plan(sighting.family, in_sizes, out_sizes, follows, scaled_output=sighting.requested is None)
    several = _one_size_guard(sighting)  # runs at several sizes: only a plan exact at every size serves them all
    if sighting.return_indices:
        return _decide_with_indices(plan, several, dynamic)
    if plan.size_agnostic:
        return PoolDecision("exact", plan.reasons() + (f" (exact at every size: {several})" if several else ""), plan)
    if not dynamic:
        return PoolDecision("left", several) if several else PoolDecision("exact", plan.reasons(), plan)
    for guard in DYNAMIC_GUARDS:
        why = guard(sighting)
        if why:
            return PoolDecision("left", why)
    requested = tuple(None if f else o for f, o in zip(follows or (False,) * len(out_sizes), out_sizes))
    form = choose_dynamic_form(sighting.family, in_sizes, requested)
    return PoolDecision("dynamic", f"dynamic=True; at the traced size: {plan.reasons()}; {form.reason}", plan, form)


def _decide_with_indices(plan: PoolPlan, several: str | None, dynamic: bool) -> PoolDecision:
    """A max pool whose indices are used: the window argmax form, specialised to the one size it ran at."""
    if several:
        return PoolDecision("left", f"return_indices=True and {several}")
    if dynamic:
        return PoolDecision(
            "left",
            "dynamic=True and return_indices=True: the indices form is specialised to the traced size; convert "
            "without dynamic=True for a graph of this size",
        )
    why = (
        "return_indices=True: each window's entries gathered and arg-maxed as PyTorch's kernel scans them (first "
        "maximum on ties, last NaN), values and indices exact"
    )
    return PoolDecision("exact", why, plan, returns_indices=True)
