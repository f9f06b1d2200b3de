"""Find: every adaptive pool of a model copy, where it is called from, and what the recording saw of it.

:func:`find_pools` walks the copy's module tree top-down, registered children and modules held in
plain lists and attributes alike (:func:`~fxpool.copying.children`). A pool module is known by its
object and needs no trace. torch.fx traces only the modules that need a graph (:func:`trace_targets`):
those whose own forward makes a functional pool call (``F.adaptive_avg_pool2d``, an area
``interpolate``), and those that call one pool module at several sizes (each call gets a replacement
of its own); where such a trace fails, the reason is kept. Tracing little keeps the conversion cheap
(a trace costs about a forward of the module) and leaves the rest of the model's code as it is.
Every pool becomes one :class:`PoolSite`:

- a pool node of a traced graph (a module call or a functional call), with the calls the
  recording saw at that node, one per run of the traced module;
- a pool module reached outside every traced graph, known by its object: it is swapped wherever
  the tree holds it, and its calls are all the recorded calls of it that no traced graph covers;
- a functional call inside code torch.fx cannot trace, or a pool inside a TorchScript module: it
  stays as it is, and the site says why.

A module whose code asks ``torch.onnx.is_in_onnx_export()`` is traced once per answer; the pools of
its export graph are sites of their own (``export_branch``), matched with the recording's export
run, except those that are the same call as one of the eager graph (``twin``). Modules with hooks,
TorchScript modules and modules whose class reads ``self.training`` or asks the export flag are one
call in their parent's graph and visited on their own. Nothing here decides or changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import fx, nn

from .calls import POOL_CLASS_NAMES, PoolCall, describe_module, normalize_output_size
from .copying import children, module_paths
from .errors import PoolCallError, error_summary
from .graph_pass import PoolNode, Traced, module_uses, pool_nodes, trace, unpassed_none_defaults
from .planning import PoolFamily
from .recording import CallShape, PoolEvent, Recording

EXPORT_SUFFIX = "@export"  # ends the location of a pool that runs only in a module's export branch


@dataclass(frozen=True)
class TracedModule:
    """One module traced whole: the graph it runs once a pool node of it is replaced (and its export graph)."""

    name: str
    module: nn.Module
    graph: fx.GraphModule
    export_graph: fx.GraphModule | None = None


@dataclass(frozen=True, eq=False)
class PoolSite:
    """One adaptive pool call site of the copy, and the calls the recording saw there."""

    location: str  # qualified module name, "<scope>:<graph node>" or "<scope>:<op>#k"; EXPORT_SUFFIX for export graphs
    call: PoolCall
    events: tuple[PoolEvent, ...]  # one per run; empty where it never ran
    traced: TracedModule | None = None  # the traced module whose graph holds ``node``
    node: fx.Node | None = None
    module: nn.Module | None = None  # a pool module outside every traced graph, swapped wherever held
    hooks_from: nn.Module | None = None  # the pool module whose hooks its replacement takes
    left: str | None = None  # why it stays as it is, whatever planning would choose
    export_branch: bool = False  # a pool of an export graph, which only the ONNX exporters run
    twin: str | None = None  # the location of the eager site that is the same call (export graphs)
    calls: int | None = None  # how often the example run called it here (default: one per event)

    @property
    def call_count(self) -> int:
        return len(self.events) if self.calls is None else self.calls


@dataclass(frozen=True)
class FoundPools:
    """What :func:`find_pools` found: the sites, the traced modules, and what could not be traced and why."""

    sites: tuple[PoolSite, ...]
    traced: tuple[TracedModule, ...]
    untraceable: tuple[tuple[str, str], ...]  # (qualified name, why it was not traced)

    @property
    def traced_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.traced)


def find_pools(root: nn.Module, recording: Recording, *, refused_traces: Mapping[str, str] | None = None) -> FoundPools:
    """Every pool site of ``root`` (a copy the caller owns), matched with ``recording``'s calls.

    ``refused_traces`` maps module names to why a whole-graph trace of them must not be used (an
    earlier self-check disagreed): those are visited below instead. A module is traced for the way
    the recording saw it called: ``None``-default parameters it was never given are traced as None,
    and guarded (see :func:`~fxpool.graph_pass.trace`).
    """
    finder = _Finder(root, recording, dict(refused_traces or {}))
    finder.visit(root, "")
    return finder.found()


@dataclass
class _Finder:
    root: nn.Module
    recording: Recording
    refused: dict[str, str]
    # In walk order; a pool module reached outside traced graphs is a (name, module) until every
    # traced graph is known, since its calls are those no traced graph covers.
    sites: list[PoolSite | tuple[str, nn.Module]] = field(default_factory=list)
    traced: list[TracedModule] = field(default_factory=list)
    untraceable: list[tuple[str, str]] = field(default_factory=list)
    visited: set[int] = field(default_factory=set)
    covered: set[str] = field(default_factory=set)  # names of pool modules a traced graph calls (node sites)

    def __post_init__(self) -> None:
        self.paths = module_paths(self.root)
        self.export = self.recording.export_branch
        self.targets = trace_targets(self.recording, self.paths)

    def found(self) -> FoundPools:
        sites = tuple(site if isinstance(site, PoolSite) else self._module_site(*site) for site in self.sites)
        return FoundPools(sites, tuple(self.traced), tuple(self.untraceable))

    def visit(self, module: nn.Module, name: str) -> None:
        if id(module) in self.visited:  # a module held in two places is visited once
            return
        self.visited.add(id(module))
        if isinstance(module, torch.jit.ScriptModule):
            self._scripted(module, name)
            return
        names = self.paths.get(id(module), [name])  # a module shared by several parents is visited once, for all
        runs = [self.recording] + ([self.export] if self.export is not None else [])
        if not any(run.within(alias) for run in runs for alias in names):
            return
        if describe_module(module) is not None:
            self.sites.append((name, module))
            return
        if type(module).forward is nn.Module.forward:  # a container (ModuleList, ModuleDict): never called
            self._descend(module, name, None)
            return
        if name in self.refused:
            self._descend(module, name, self.refused[name])
            return
        if not self.targets.intersection(names):  # nothing in its own forward needs a graph: its pools are below
            self._descend(module, name, None)
            return
        unpassed = _unpassed_in_every_call(module, self.recording.call_shapes.get(name, set()))
        options = {"output_spec": self.recording.output_specs.get(name), "export_branches": self.export is not None}
        try:  # its own forward alone, submodules as single calls: cheap, and leaves them as they are
            traced = trace(module, unpassed, shallow=True, **options)  # type: ignore[arg-type]
        except Exception:  # torch.fx's trace errors have no common base class
            try:  # code that needs a submodule's output as values (tuple unpacking, say): trace into them
                traced = trace(module, unpassed, **options)  # type: ignore[arg-type]
            except Exception as error:
                why = error_summary(error)
                if self.recording.export_branch_error and "is_in_onnx_export" in why:
                    why += f"; its export branch could not be recorded ({self.recording.export_branch_error})"
                self._descend(module, name, why)
                return
        self._graph(module, name, traced)

    def _graph(self, module: nn.Module, name: str, traced: Traced) -> None:
        gm, export_gm = traced.graph_module, traced.export_graph_module
        eager_runs = self._runs(self.recording, module, traced)
        nodes = pool_nodes(gm)
        mismatch = _mismatch(nodes, eager_runs)
        export_nodes: list[PoolNode] = []
        if mismatch is None and export_gm is not None:
            assert self.export is not None  # export graphs are traced only where the export run was recorded
            export_nodes = pool_nodes(export_gm)
            mismatch = _mismatch(export_nodes, self._runs(self.export, module, traced), branch="export branch")
        if mismatch is not None:
            self._descend(module, name, mismatch)
            return
        part = TracedModule(name, module, gm, export_gm)
        self.traced.append(part)
        eager_sites = self._node_sites(part, gm, nodes, eager_runs, "")
        self.sites.extend(eager_sites)
        if export_gm is not None:
            assert self.export is not None
            export_sites = self._node_sites(part, export_gm, export_nodes, self._runs(self.export, module, traced), EXPORT_SUFFIX)
            self.sites.extend(_with_twin(site, eager_sites) for site in export_sites)
        for graph_nodes in (nodes, export_nodes):
            self.covered |= {_join(name, str(pool.node.target)) for pool in graph_nodes if pool.node.op == "call_module"}
        if traced.shallow:  # every submodule was one call: visit them all, but the pools the graph calls
            for child_name, child in children(module):
                if _join(name, child_name) not in self.covered:
                    self.visit(child, _join(name, child_name))
            return
        for leaf in traced.opaque_leaves:  # hooked, scripted and flag-reading leaves: their calls stay
            self.visit(module.get_submodule(leaf), _join(name, leaf))

    def _runs(self, recording: Recording, module: nn.Module, traced: Traced) -> list[list[PoolEvent]]:
        """The calls the graph of ``module`` makes, per run of it under any of its names (a module shared
        by several parents runs its one graph for all): those of its own forward, for a shallow graph;
        else all within it but those inside the leaves it did not look into."""
        runs = []
        for name in self.paths[id(module)]:
            within = recording.within(name)
            if traced.shallow:
                runs += _runs_of(name, [e for e in within if _caller(e) == name])
                continue
            inside_opaque = {id(e) for leaf in traced.opaque_leaves for e in recording.within(_join(name, leaf))}
            runs += _runs_of(name, [e for e in within if id(e) not in inside_opaque])
        return runs

    def _node_sites(
        self, traced: TracedModule, gm: fx.GraphModule, nodes: list[PoolNode], runs: list[list[PoolEvent]], suffix: str
    ) -> list[PoolSite]:
        sites = []
        calls_of: dict[str, int] = {}
        for k, pool in enumerate(nodes):
            node_events = tuple(run[k] for run in runs)
            hooks_from: nn.Module | None = None
            if pool.node.op == "call_module":
                location = _join(traced.name, str(pool.node.target))
                hooks_from = gm.get_submodule(str(pool.node.target))
                if module_uses(gm, pool.node.target) > 1:
                    calls_of[location] = calls_of.get(location, 0) + 1
                    location += f"#{calls_of[location] - 1}"
            else:
                location = f"{node_events[0].innermost or '<root>'}:{pool.node.name}"
            sites.append(
                PoolSite(
                    location + suffix,
                    pool.call,
                    node_events,
                    traced=traced,
                    node=pool.node,
                    hooks_from=hooks_from,
                    export_branch=bool(suffix),
                )
            )
        return sites

    def _descend(self, module: nn.Module, name: str, why: str | None) -> None:
        if why is not None:
            self.untraceable.append((name, why))
        for child_name, child in children(module):
            self.visit(child, _join(name, child_name))
        names = set(self.paths.get(id(module), [name]))
        direct = [e for e in self.recording.events if e.module_name is None and e.innermost in names]
        for k, event in enumerate(direct):
            reason = (
                f"functional call inside the forward of {name or 'the model'}, which has no usable torch.fx graph ({why}); "
                f"call an nn.Adaptive*Pool module instead (modules are swapped without a trace), or make that forward traceable"
            )
            self.sites.append(PoolSite(f"{name or '<root>'}:{event.call.op}#{k}", event.call, (event,), left=reason))
        if self.export is None:
            return
        seen = {_call_key(e) for e in direct}
        export_only = [e for e in self.export.events if e.module_name is None and e.innermost in names and _call_key(e) not in seen]
        for k, event in enumerate(export_only):
            reason = (
                f"functional call in the export branch (torch.onnx.is_in_onnx_export()) of {name or 'the model'}, "
                f"which has no usable torch.fx graph ({why}); call an nn.Adaptive*Pool module instead, or make that "
                f"forward traceable"
            )
            location = f"{name or '<root>'}:{event.call.op}#{k}{EXPORT_SUFFIX}"
            self.sites.append(PoolSite(location, event.call, (event,), left=reason, export_branch=True))

    def _module_site(self, name: str, module: nn.Module) -> PoolSite:
        """A pool module reached outside traced graphs: its calls under every name no graph calls it by."""
        aliases = {p for p in self.paths.get(id(module), [name]) if p not in self.covered} | {name}
        events = [e for e in self.recording.events if e.module_name in aliases]
        calls = len(events)
        if self.export is not None:  # calls that only its export branch makes are calls of it too
            seen = {_call_key(e) for e in events}
            events += [e for e in self.export.events if e.module_name in aliases and _call_key(e) not in seen]
        call = describe_module(module)
        assert call is not None
        return PoolSite(name or "<root>", call, tuple(events), module=module, hooks_from=module, calls=calls)

    def _scripted(self, module: torch.jit.ScriptModule, name: str) -> None:
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
            reason = (
                "inside a TorchScript (torch.jit.script) submodule, which fxpool can neither see into nor rewrite; "
                "script it after converting instead"
            )
            call = PoolCall(family, dims, f"nn.{class_name}", "module", output_size)
            self.sites.append(PoolSite(_join(name, sub_name) or "<root>", call, (), left=reason))


_GIVEN = object()  # stands for an argument that was passed and is not None


def _unpassed_in_every_call(module: nn.Module, shapes: set[CallShape]) -> tuple[str, ...] | None:
    """The ``None``-default parameters every recorded call of ``module`` left out or passed as None
    (None where the calls disagree, so no parameter may be fixed)."""
    found = set()
    for positional, keywords in shapes:
        args = tuple(None if is_none else _GIVEN for is_none in positional)
        found.add(unpassed_none_defaults(module, args, {k: None if is_none else _GIVEN for k, is_none in keywords}))
    return found.pop() if len(found) == 1 else None


def trace_targets(recording: Recording, paths: Mapping[int, list[str]]) -> set[str]:
    """The modules that need a torch.fx graph: the callers of functional pool calls, and of pool modules
    called at more than one size (in either branch of code asking ``torch.onnx.is_in_onnx_export()``)."""
    owner = {path: key for key, names in paths.items() for path in names}  # a module shared by two parents: one key
    targets: set[str] = set()
    sizes: dict[int, set[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    callers: dict[int, set[str]] = {}
    for run in (recording, recording.export_branch):
        for event in run.events if run is not None else ():
            if event.module_name is None:
                targets.add(_caller(event))
                continue
            key = owner.get(event.module_name, hash(event.module_name))
            dims = event.spatial_dims
            sizes.setdefault(key, set()).add((event.input_shape[-dims:], event.output_shape[-dims:]))
            if len(event.scope) > 1:
                callers.setdefault(key, set()).add(_caller(event))
    for key, seen in sizes.items():
        if len(seen) > 1:
            targets |= callers.get(key, set())
    return targets


def _with_twin(site: PoolSite, eager_sites: list[PoolSite]) -> PoolSite:
    """An export-graph site that makes the same call as an eager one (same module or source line, same sizes)."""
    key = tuple(_call_key(e) for e in site.events)
    for eager in eager_sites:
        if tuple(_call_key(e) for e in eager.events) == key and eager.call == site.call:
            return PoolSite(
                site.location,
                site.call,
                site.events,
                traced=site.traced,
                node=site.node,
                hooks_from=site.hooks_from,
                export_branch=True,
                twin=eager.location,
            )
    return site


def _call_key(event: PoolEvent) -> tuple[object, ...]:
    """What makes two recorded calls the same call: where it is made, and its sizes."""
    return (event.call.op, event.module_name, event.source, tuple(n for n, _ in event.scope), event.input_shape, event.output_shape)


def _caller(event: PoolEvent) -> str:
    """The module whose own forward made the call: the innermost running module, or for a pool module
    (innermost itself), the one that called it."""
    if event.module_name is None:
        return event.innermost
    return event.scope[-2][0] if len(event.scope) > 1 else ""


def _runs_of(name: str, events: list[PoolEvent]) -> list[list[PoolEvent]]:
    """The events of each call of module ``name``, in order: one list per call."""
    runs: dict[int, list[PoolEvent]] = {}
    for event in events:
        invocation = next(count for n, count in event.scope if n == name)
        runs.setdefault(invocation, []).append(event)
    return [runs[i] for i in sorted(runs)]


def _mismatch(nodes: list[PoolNode], runs: list[list[PoolEvent]], branch: str = "") -> str | None:
    expected = [pool.call.op for pool in nodes]
    for run in runs:
        seen = [event.call.op for event in run]
        if seen != expected:
            where = f" of its {branch}" if branch else ""
            return (
                f"the traced graph{where} has pools {expected} but the example run called {seen}; "
                f"the forward takes a different path when traced"
            )
    return None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name
