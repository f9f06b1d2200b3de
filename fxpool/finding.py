"""Find: every adaptive pool of a model copy, from the recording against its module tree (no trace).

Sites: a pool module (``name``; ``name#k`` per size where called at several), a functional call per call as written
and input size in its owner's forward (``owner:op#k``), a pool inside TorchScript (left, with why), fxpool's own
replacements (already converted); ``@export`` ends a pool only the export branch runs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .calls import POOL_CLASS_NAMES, PoolCall, normalize_output_size
from .copying import tree_index
from .errors import PoolCallError
from .proving import jit_nodes
from .recording import PoolEvent, Recording
from .steps import PoolFamily

EXPORT_SUFFIX = "@export"  # ends the location of a pool that runs only in the export branch


@dataclass(frozen=True, eq=False)
class PoolSite:
    """One adaptive pool call site of the copy, and the calls the recording saw there."""

    location: str  # qualified module name, "name#k" (a module at its k-th size) or "owner:op#k" (a call)
    call: PoolCall
    events: tuple[PoolEvent, ...]  # one per run; empty where it never ran
    module: nn.Module | None = None  # the pool module, swapped wherever held
    owner: nn.Module | None = None  # the module whose forward makes this functional call (intercepted)
    owner_name: str = ""
    size: tuple[int, ...] | None = None  # the input's spatial size, where the site is one size of several calls
    left: str | None = None  # why it stays as it is, whatever planning would choose
    already: str | None = None  # one of fxpool's replacements: what it computes
    export_branch: bool = False  # a pool only the export branch runs
    calls: int | None = None  # how often the example run called it here (default: one per event)
    node: str | None = None  # an ATen node of a graph (fxpool.programs), by name
    symbolic: bool = False  # the graph leaves a spatial size of its input symbolic: the dynamic-size form

    @property
    def call_count(self) -> int:
        return len(self.events) if self.calls is None else self.calls


@dataclass(frozen=True)
class FoundPools:
    """What :func:`find_pools` found: the sites, and the modules whose forward makes functional calls."""

    sites: tuple[PoolSite, ...]

    @property
    def intercepted(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.owner_name for s in self.sites if s.owner is not None))


def find_pools(root: nn.Module, recording: Recording) -> FoundPools:
    """Every pool site of ``root`` (a copy the caller owns), matched with ``recording``'s calls."""
    modules, paths = tree_index(root)
    by_name = {path: module for module in modules for path in paths[id(module)]}
    owner_of = {path: names[0] for names in paths.values() for path in names}  # a shared module: one name
    events = list(recording.events)
    export_only: set[int] = set()
    if recording.export_branch is not None:
        seen = {_call_key(e) for e in events}
        for event in recording.export_branch.events:
            if _call_key(event) not in seen:
                export_only.add(id(event))
                events.append(event)
    sites: list[PoolSite] = []
    by_module: dict[str, list[PoolEvent]] = {}
    by_call: dict[tuple[str, PoolCall, tuple[int, ...]], list[PoolEvent]] = {}
    for event in events:
        if event.already_converted is not None:
            name = owner_of.get(event.module_name or "", event.module_name or "")
            if all(s.location != (name or "<root>") for s in sites):
                sites.append(PoolSite(name or "<root>", event.call, (event,), already=event.already_converted))
        elif event.module_name is not None:
            by_module.setdefault(owner_of.get(event.module_name, event.module_name), []).append(event)
        else:
            owner = owner_of.get(event.innermost, event.innermost)
            by_call.setdefault((owner, event.call, _spatial(event)), []).append(event)
    for name, module_events in by_module.items():
        sites += _module_sites(name, by_name[name], module_events, export_only)
    counts: dict[str, int] = {}
    for (owner, call, size), runs in by_call.items():
        k = counts[owner] = counts.get(owner, -1) + 1
        branch = all(id(e) in export_only for e in runs)
        location = f"{owner or '<root>'}:{call.op}#{k}" + (EXPORT_SUFFIX if branch else "")
        calls = sum(id(e) not in export_only for e in runs) or len(runs)  # a call of the export branch alone: its runs there
        sites.append(
            PoolSite(
                location, call, tuple(runs), owner=by_name[owner], owner_name=owner, size=size, export_branch=branch, calls=calls
            )
        )
    inside: set[int] = set()  # modules of a TorchScript module already read
    for module in modules:
        if isinstance(module, torch.jit.ScriptModule) and id(module) not in inside:
            inside.update(id(m) for m in module.modules())
            sites += _scripted(module, paths[id(module)][0])
    return FoundPools(tuple(sites))


def _module_sites(name: str, module: nn.Module, events: list[PoolEvent], export_only: set[int]) -> list[PoolSite]:
    """A pool module's site, or one per spatial size where it is called at several."""
    call = events[0].call
    sizes = list(dict.fromkeys(_spatial(e) for e in events))
    # every axis reduced whole (output 1) or kept (None): one replacement serves every size, so one site
    if len(sizes) == 1 or (call.output_size is not None and all(size in (1, None) for size in call.output_size)):
        groups: list[tuple[str, tuple[int, ...] | None, list[PoolEvent]]] = [("", None, events)]
    else:
        groups = [(f"#{k}", size, [e for e in events if _spatial(e) == size]) for k, size in enumerate(sizes)]
    sites = []
    for suffix, size, at_size in groups:
        branch = all(id(e) in export_only for e in at_size)
        location = (name or "<root>") + suffix + (EXPORT_SUFFIX if branch else "")
        calls = sum(id(e) not in export_only for e in at_size)
        sites.append(PoolSite(location, call, tuple(at_size), module=module, size=size, export_branch=branch, calls=calls))
    return sites


_SCRIPTED = (
    "inside a TorchScript (torch.jit.script) submodule, which fxpool can neither see into nor rewrite; "
    "script it after converting instead"
)


def _scripted(module: torch.jit.ScriptModule, name: str) -> list[PoolSite]:
    """Every pool of a TorchScript module, a site left with the reason: its pool modules by class, then the functional
    calls of its inlined graph (which holds the pool modules' calls too, first)."""
    sites = []
    for sub_name, sub in module.named_modules():
        class_name = getattr(sub, "original_name", None)
        if class_name not in POOL_CLASS_NAMES:
            continue
        family: PoolFamily = "avg" if class_name.startswith("AdaptiveAvg") else "max"
        dims = int(class_name[-2])
        try:
            output_size = normalize_output_size(getattr(sub, "output_size", None), dims, class_name)
        except PoolCallError:
            output_size = None
        call = PoolCall(family, dims, f"nn.{class_name}", "module", output_size)
        location = ".".join(part for part in (name, sub_name) if part) or "<root>"
        sites.append(PoolSite(location, call, (), left=_SCRIPTED))
    graph = getattr(module, "inlined_graph", None)
    nodes = [] if graph is None else list(jit_nodes(graph.nodes()))
    ops = [n.kind().split("::")[-1] for n in nodes if "adaptive_" in n.kind() and "pool" in n.kind()]
    pool_modules = len(sites)
    for index, op in enumerate(ops[pool_modules:]):
        call = PoolCall("max" if "max" in op else "avg", int(op[-2]) if op[-2].isdigit() else 2, f"torch.{op}", "functional", None)
        sites.append(PoolSite(f"{name or '<root>'}:{op}#{index}", call, (), left=f"a functional call {_SCRIPTED}"))
    return sites


def _spatial(event: PoolEvent) -> tuple[int, ...]:
    return event.input_shape[len(event.input_shape) - event.spatial_dims :]


def _call_key(event: PoolEvent) -> tuple[object, ...]:
    """What makes two recorded calls the same call: where it is made, and its sizes."""
    return (event.call, event.module_name, event.source, event.scope, event.input_shape, event.output_shape)
