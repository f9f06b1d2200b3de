"""Build: each replaced pool's module, put in its place in the copy: a pool module swapped wherever the tree
holds it, its hooks carried (at several sizes, a :class:`~fxpool.intercepting.PoolCalls` table); a module's
functional calls in a table of its own, its forward intercepted (:func:`~fxpool.intercepting.intercept`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .copying import CALL_HOOK_DICTS, carry_hooks, shallow_module_copy, substitute
from .deciding import SiteDecision, requested_sizes
from .dynamic import DynamicAdaptiveAvgPool, DynamicAdaptiveMaxPool
from .finding import FoundPools
from .indices import WindowArgmaxPool
from .intercepting import PoolCalls, intercept
from .recording import PoolEvent
from .replacements import ExactAdaptivePool


@dataclass(frozen=True)
class Built:
    """The converted copy, and whether any pool was replaced in it."""

    root: nn.Module
    changed: bool


def build(root: nn.Module, found: FoundPools, decisions: Sequence[SiteDecision], fallback_device: torch.device) -> Built:
    """Put the replacement of every replaced site of ``found`` into ``root`` (the caller's copy)."""
    swaps: dict[nn.Module, nn.Module] = {}
    tables: dict[int, tuple[nn.Module, PoolCalls]] = {}  # by the module that owns or is replaced by the table
    replaced_tables: set[int] = set()
    changed = False
    for chosen in decisions:
        site = chosen.site
        if site.owner is None and site.module is None:
            continue  # left where it is, or already converted
        replacement = replacement_module(chosen, site.events[0], fallback_device) if chosen.replaced else None
        changed |= replacement is not None
        plan = chosen.decision.plan
        agnostic = chosen.decision.action == "dynamic" or (plan is not None and plan.size_agnostic)
        size = None if agnostic and site.owner is not None else site.size  # one entry serves every size
        if site.owner is not None:
            _, table = tables.setdefault(id(site.owner), (site.owner, PoolCalls(site.owner_name or "<root>")))
            table.add(site.call, size, replacement)
        elif site.size is None:  # a pool module at one size
            if replacement is not None:
                assert site.module is not None
                carry_hooks(site.module, replacement)
                swaps[site.module] = replacement
        else:  # one size of a pool module called at several
            assert site.module is not None
            _, table = tables.setdefault(id(site.module), (site.module, PoolCalls(site.location.split("#")[0], site.call)))
            table.add(site.call, size, replacement if replacement is not None else _native_copy(site.module))
            if replacement is not None:
                replaced_tables.add(id(site.module))
    if not changed:
        return Built(root, False)
    for module, table in tables.values():
        if table.call is None:
            intercept(module, table)
        elif id(module) in replaced_tables:
            carry_hooks(module, table)
            swaps[module] = table
    substitute(root, swaps)
    return Built(swaps.get(root, root), True)  # the model may be a pool itself


def replacement_module(chosen: SiteDecision, event: PoolEvent, fallback_device: torch.device) -> nn.Module:
    """The module that computes the decided plan (or the dynamic-size form) for ``event``'s pool."""
    decision, location = chosen.decision, chosen.site.location
    plan = decision.plan
    assert plan is not None and decision.action != "left"
    device = fallback_device if event.device.type == "meta" else event.device
    if decision.action == "dynamic":
        sizes = requested_sizes(chosen.site.call, event, location) or event.output_shape[-event.spatial_dims :]
        pool_class = DynamicAdaptiveAvgPool if plan.family == "avg" else DynamicAdaptiveMaxPool
        assert decision.dynamic_form is not None
        replacement: nn.Module = pool_class(sizes, location=location, kind=decision.dynamic_form.kind)
    elif decision.returns_indices:
        replacement = WindowArgmaxPool(plan.in_sizes, plan.out_sizes, location, device)
    else:
        weight_dtype = torch.float64 if event.dtype == torch.float64 else torch.float32
        batched = len(event.input_shape) == event.spatial_dims + 2
        replacement = ExactAdaptivePool(plan, location, weight_dtype, device, batched=batched)
    replacement.train(False)  # replacements hold no training-dependent state; keep them out of train mode
    return replacement


def _native_copy(pool: nn.Module) -> nn.Module:
    """A hook-free copy of a pool module, for the sizes of it left to PyTorch inside a table."""
    copy = shallow_module_copy(pool)
    for name in CALL_HOOK_DICTS:
        copy.__dict__[name] = type(pool.__dict__[name])()
    return copy
