"""Build: each replaced pool's module, put in its place in the copy.

:func:`build` makes the module every decision asks for (:func:`replacement_module`: an
:class:`~fxpool.replacements.ExactAdaptivePool` of the plan, or the dynamic-size form), gives it the
hooks of the pool it stands for, and puts it in place:

- pool nodes of a traced graph are swapped (:func:`~fxpool.graph_pass.replace_nodes`) and the
  module runs the graph from then on (:func:`~fxpool.copying.install_graph`, with its export graph
  where it has one);
- a pool module reached outside traced graphs is swapped wherever the tree holds it
  (:func:`~fxpool.copying.substitute`), the root included;
- a pool module every one of whose calls was replaced is swapped wherever else the tree still holds
  it too (a list beside its registered name), so the converted model holds no replaced pool.

It returns the converted root and whether anything changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn

from .copying import carry_hooks, install_graph, substitute
from .deciding import SiteDecision, requested_sizes
from .dynamic import DynamicAdaptiveAvgPool, DynamicAdaptiveMaxPool
from .finding import FoundPools, TracedModule
from .graph_pass import replace_nodes
from .recording import PoolEvent
from .replacements import ExactAdaptivePool


@dataclass(frozen=True)
class Built:
    """The converted copy, and whether any pool was replaced in it."""

    root: nn.Module
    changed: bool


def build(
    root: nn.Module, found: FoundPools, decisions: Sequence[SiteDecision], fallback_device: torch.device, quantizable: bool = False
) -> Built:
    """Put the replacement of every replaced site of ``found`` into ``root`` (the caller's copy).

    ``quantizable``: the replacements trace their averaging matrices as an einsum (see
    :func:`~fxpool.replacements.einsum_along`)."""
    made: dict[str, nn.Module] = {}  # location -> its replacement
    for chosen in decisions:
        site = chosen.site
        if site.twin is not None or not chosen.replaced:
            continue
        replacement = replacement_module(chosen, site.events[0], fallback_device, quantizable)
        if site.hooks_from is not None:
            carry_hooks(site.hooks_from, replacement)
        made[site.location] = replacement
    for chosen in decisions:  # an export-graph twin runs its eager site's replacement
        twin = chosen.site.twin
        if twin is not None and twin in made:
            made[chosen.site.location] = made[twin]
    if not made:
        return Built(root, False)

    for traced in found.traced:
        _rewrite_graphs(traced, decisions, made)
    swaps = {
        site.module: made[site.location]
        for site in (d.site for d in decisions)
        if site.module is not None and site.location in made
    }
    swaps.update(_fully_replaced(decisions, made))
    if root in swaps:  # the model is a pool itself
        return Built(swaps[root], True)
    substitute(root, swaps)
    return Built(root, True)


def replacement_module(
    chosen: SiteDecision, event: PoolEvent, fallback_device: torch.device, quantizable: bool = False
) -> nn.Module:
    """The module that computes the decided plan (or the dynamic-size form) for ``event``'s pool."""
    decision, location = chosen.decision, chosen.site.location
    plan = decision.plan
    assert plan is not None and decision.action != "left"
    if decision.action == "dynamic":
        sizes = requested_sizes(chosen.site.call, event, location) or event.output_shape[-event.spatial_dims :]
        pool_class = DynamicAdaptiveAvgPool if plan.family == "avg" else DynamicAdaptiveMaxPool
        replacement: nn.Module = pool_class(sizes, location=location)
    else:
        device = fallback_device if event.device.type == "meta" else event.device
        weight_dtype = torch.float64 if event.dtype == torch.float64 else torch.float32
        batched = len(event.input_shape) == event.spatial_dims + 2
        replacement = ExactAdaptivePool(plan, location, weight_dtype, device, batched=batched, quantizable=quantizable)
    replacement.train(False)  # replacements hold no training-dependent state; keep them out of train mode
    return replacement


def _rewrite_graphs(traced: TracedModule, decisions: Sequence[SiteDecision], made: dict[str, nn.Module]) -> None:
    eager: dict[fx.Node, nn.Module] = {}
    export: dict[fx.Node, nn.Module] = {}
    for chosen in decisions:
        site = chosen.site
        if site.traced is traced and site.node is not None and site.location in made:
            (export if site.export_branch else eager)[site.node] = made[site.location]
    if not eager and not export:
        return
    if eager:
        replace_nodes(traced.graph, eager, mirror=traced.module)
    if export:
        assert traced.export_graph is not None
        # Fresh names: a path the eager graph replaced may hold another replacement in the export graph.
        replace_nodes(traced.export_graph, export, mirror=traced.module, fresh_names=True)
    install_graph(traced.module, traced.graph, traced.export_graph)


def _fully_replaced(decisions: Sequence[SiteDecision], made: dict[str, nn.Module]) -> dict[nn.Module, nn.Module]:
    """Pool modules every site of which got one and the same replacement: (pool, replacement)."""
    pools: dict[int, nn.Module] = {}
    replacements: dict[int, list[nn.Module | None]] = {}
    for chosen in decisions:
        pool = chosen.site.hooks_from
        if pool is not None:
            pools[id(pool)] = pool
            replacements.setdefault(id(pool), []).append(made.get(chosen.site.location))
    return {pools[key]: got[0] for key, got in replacements.items() if got[0] is not None and all(new is got[0] for new in got)}
