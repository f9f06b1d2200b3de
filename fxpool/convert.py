"""``convert`` and ``plan``: find every adaptive pool of a model, replace it exactly, and check.

The steps, each in its own module:

1. :func:`~fxpool.recording.record_pool_calls` runs the model once, without side effects, and
   records every pool call with its input and output sizes, and the model's output;
2. the model's module tree is copied over the same tensors (:func:`~fxpool.copying.structural_copy`);
3. the copy is traced whole with torch.fx; where that fails, the largest submodules that do trace
   are converted instead, pool modules inside untraceable code are swapped directly, and
   functional calls that neither reaches are reported. Modules with hooks of their own are kept
   as they are (their hooks run) and converted below; a pool's hooks move to its replacement;
4. each pool node is matched with its recorded call, :func:`~fxpool.planning.decide_pool` picks
   its replacement and :func:`~fxpool.graph_pass.replace_nodes` swaps it in;
5. :func:`~fxpool.checking.self_check` runs the result once on the example: each replacement
   against the native pool on its own input, the whole model against the recorded output. A
   replacement that disagrees is undone; a traced graph whose model output disagrees is converted
   below instead; then the check runs again.

Every decision becomes a :class:`~fxpool.report.PoolRecord`; the check is in the report too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from .calls import POOL_CLASS_NAMES, PoolCall, describe_module, normalize_output_size
from .checking import SelfCheck, self_check
from .copying import carry_hooks, install_graph, module_paths, structural_copy
from .dynamic import DynamicAdaptiveAvgPool, DynamicAdaptiveMaxPool
from .errors import SelfCheckError, UnconvertedPoolError, UnsupportedModelError, error_summary
from .example import Example, read_example
from .globalstate import LOCK
from .graph_pass import module_uses, pool_nodes, replace_nodes, trace, unpassed_none_defaults
from .planning import PoolDecision, PoolSighting, decide_pool
from .recording import PoolEvent, Recording, record_pool_calls
from .replacements import ExactAdaptivePool
from .report import REPORT_ATTRIBUTE, ConversionReport, PoolRecord

# A conversion that fails its self-check is redone with what failed undone; each round undoes at
# least one replacement or one level of tracing, so this bounds only pathological models.
MAX_CHECK_ROUNDS = 16


def convert(
    model: nn.Module,
    example_input: Any,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    dynamic: bool = False,
) -> nn.Module:
    """Return a model that computes the same function with every adaptive pool replaced exactly.

    ``example_input`` and ``example_kwargs`` are read as ``torch.onnx.export`` reads ``args`` and
    ``kwargs``: a tuple of positional arguments or any other single argument (a tensor, a list of
    images); without ``example_kwargs``, a dict ending the tuple holds the keyword arguments, so a
    model taking a dict positionally is given ``(batch, {})``. Replacements are
    specialised to the spatial sizes this input produces and raise
    :class:`~fxpool.errors.SpatialSizeError` on other sizes, unless ``dynamic=True``, under which
    every pool computes its windows from the size it is given.

    The converted model is run once on the example and compared with the original (the report's
    ``check``); what disagrees is undone. The caller's model is never changed. The result shares
    its parameters and buffers (the same tensors, no copy) and copies only the module objects;
    :func:`~fxpool.report.report_of` gives its :class:`~fxpool.report.ConversionReport`. With
    ``strict=True`` any pool that would be left to PyTorch raises
    :class:`~fxpool.errors.UnconvertedPoolError`, and a self-check that did not pass at once raises
    :class:`~fxpool.errors.SelfCheckError`.

    >>> import torch, torchvision
    >>> from fxpool import report_of
    >>> converted = convert(torchvision.models.vgg11(weights=None), torch.randn(1, 3, 160, 160))
    >>> print(report_of(converted).records[0].replacement)
    kron-matmul HW 5x5->7x7
    >>> report_of(converted).check.status
    'passed'
    """
    converted, report = _convert(model, read_example(example_input, example_kwargs), dynamic)
    if strict:
        enforce_strict(report, for_export=False)
    setattr(converted, REPORT_ATTRIBUTE, report)
    return converted


def enforce_strict(report: ConversionReport, *, for_export: bool) -> None:
    """What ``strict=True`` refuses: pools left to PyTorch, and a self-check that did not pass at once.

    For ``convert`` every pool left to PyTorch counts; for ``export`` and ``onnx_export_hook`` only
    those the export leaves to the stock exporter (average pools are lowered exactly at export).
    """
    left = report.unexportable if for_export else report.unconverted
    if left:
        translated = len(report.unconverted) - len(report.unexportable)
        note = (
            ""
            if for_export or not translated
            else f"\n{translated} of them are average pools that fxpool.export and onnx_export_hook lower exactly at "
            f"export time, so strict=True there accepts them; here strict asks for every pool replaced in eager."
        )
        what = "the export would leave to the stock exporter" if for_export else "would be left to PyTorch"
        raise UnconvertedPoolError(
            f"strict=True and {len(left)} adaptive pool(s) {what}:\n" + ConversionReport(left).table() + note
        )
    if report.check is not None and (report.check.actions or report.check.status not in ("passed", "skipped")):
        raise SelfCheckError(f"strict=True and the self-check did not pass at once: {report.check.summary()}")


def explain(
    model: nn.Module, example_input: Any, *, example_kwargs: Mapping[str, Any] | None = None, dynamic: bool = False
) -> ConversionReport:
    """The report ``convert`` would produce (every pool, its replacement and why), without the converted model."""
    return _convert(model, read_example(example_input, example_kwargs), dynamic)[1]


def _convert(model: nn.Module, example: Example, dynamic: bool) -> tuple[nn.Module, ConversionReport]:
    if isinstance(model, torch.jit.ScriptModule):
        raise UnsupportedModelError(
            f"fxpool.convert got a TorchScript module ({type(model).__name__}); TorchScript code cannot be "
            f"traced or rewritten. Pass the Python nn.Module you scripted (before torch.jit.script/trace), "
            f"and script the converted model if you need TorchScript."
        )
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxpool.convert needs an nn.Module, got {type(model).__name__}")
    with LOCK:  # the example runs fork the global RNGs and torch.fx patches nn.Module while it traces
        recording = record_pool_calls(model, example)
        undo = _Undo()
        first: tuple[nn.Module, _Conversion, SelfCheck] | None = None
        deterministic: bool | None = None  # asked once, at the first whole-model mismatch
        for _ in range(MAX_CHECK_ROUNDS):
            applied = tuple(undo.actions)
            conversion = _Conversion(
                recording, dynamic, undo, _fallback_device(model), unpassed_none_defaults(model, example.args, example.kwargs)
            )
            copy = structural_copy(model)
            conversion.paths = module_paths(copy)
            converted = conversion.module(copy, "")
            check = self_check(converted, example, recording.output) if conversion.changed else _unchanged_check()
            check = check.with_actions(applied)
            first = first or (converted, conversion, check)
            if check.status != "failed":
                break
            if not check.failed_replacements and deterministic is None:
                deterministic = not _nondeterministic(model, example, recording)
            if deterministic is False:
                converted, conversion, check = first
                check = _inconclusive(check)
                break
            if not undo.learn(check, conversion):
                break  # nothing left to undo: the last conversion stands, its check says failed
    report = ConversionReport(tuple(conversion.records), tuple(conversion.traced), tuple(conversion.untraceable), check)
    previous = getattr(model, REPORT_ATTRIBUTE, None)
    if isinstance(previous, ConversionReport):  # converting a converted model: what was done before stays on record
        report = ConversionReport(
            previous.records + report.records,
            previous.traced + report.traced,
            previous.untraceable + report.untraceable,
            report.check,
        )
    return converted, report


def _unchanged_check() -> SelfCheck:
    return SelfCheck("skipped", "nothing was replaced, so the model is the original")


def _inconclusive(check: SelfCheck) -> SelfCheck:
    return SelfCheck(
        "inconclusive",
        check.compared,
        check.output_error,
        check.output_tolerance,
        check.replacements,
        (check.mismatch or "") + "; the original itself gives other outputs on a second run of the "
        "example (it is not deterministic), so the comparison cannot decide",
    )


def _nondeterministic(model: nn.Module, example: Example, recording: Recording) -> bool:
    """True when a second run of the unconverted model already differs from the recorded output."""
    return self_check(structural_copy(model), example, recording.output).status == "failed"


def _fallback_device(model: nn.Module) -> torch.device:
    """Where replacement constants go when the example is on the meta device: beside the weights."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        if tensor.device.type != "meta":
            return tensor.device
    return torch.device("cpu")


@dataclass
class _Undo:
    """What earlier rounds of the self-check refused: replacements by location, traces by module name."""

    replacements: dict[str, str] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)

    def learn(self, check: SelfCheck, conversion: _Conversion) -> bool:
        """Record what to undo after a failed check; False when nothing is left to undo."""
        if check.failed_replacements:
            for failed in check.failed_replacements:
                why = (
                    f"self-check: this replacement differed from the native pool by {failed.max_error:.3g} "
                    f"(allowed {failed.tolerance:.3g}), so it was undone"
                )
                self.replacements[failed.location] = why
                self.actions.append(f"{failed.location}: {why}")
            return True
        blamed = [name for name in conversion.traced if name not in self.traces]
        if not blamed:
            # Nothing pins the mismatch down: undo every replacement left, so that what is returned
            # is the original's function rather than a conversion known to differ.
            left = [r.location for r in conversion.records if r.converted and r.location not in self.replacements]
            for location in left:
                why = (
                    f"self-check: the converted model differed from the original ({check.mismatch}) and no "
                    f"single replacement or trace could be blamed, so every replacement was undone"
                )
                self.replacements[location] = why
                self.actions.append(f"{location}: {why}")
            return bool(left)
        outermost = min(name.count(".") + bool(name) for name in blamed)
        for name in blamed:
            if name.count(".") + bool(name) == outermost:
                why = (
                    f"self-check: traced as one graph, the model's output differed from the original "
                    f"({check.mismatch}), so it was converted below instead"
                )
                self.traces[name] = why
                self.actions.append(f"{name or '<root>'}: {why}")
        return True


class _Conversion:
    """Walks the module tree top-down, converting the largest parts that trace."""

    def __init__(
        self, recording: Recording, dynamic: bool, undo: _Undo, fallback_device: torch.device, root_unpassed: tuple[str, ...]
    ) -> None:
        self.recording = recording
        self.root_unpassed = root_unpassed
        self.dynamic = dynamic
        self.undo = undo
        self.fallback_device = fallback_device
        self.records: list[PoolRecord] = []
        self.traced: list[str] = []
        self.untraceable: list[tuple[str, str]] = []
        self.done: dict[int, nn.Module] = {}
        self.changed = False
        self.paths: dict[int, list[str]] = {}  # every qualified name of each module of the tree

    def module(self, module: nn.Module, name: str) -> nn.Module:
        if id(module) in self.done:  # a submodule shared by two parents is converted once
            return self.done[id(module)]
        self.done[id(module)] = module  # a module holding itself below must not recurse
        result = self._convert_module(module, name)
        self.done[id(module)] = result
        return result

    def _convert_module(self, module: nn.Module, name: str) -> nn.Module:
        if isinstance(module, torch.jit.ScriptModule):
            self._scripted(module, name)
            return module
        events = self.recording.within(name)
        if not events:
            return module
        if describe_module(module) is not None:
            return self._pool_module(module, name)
        if type(module).forward is nn.Module.forward:  # a container (ModuleList, ModuleDict): never called
            return self._descend(module, name, None, events)
        if name in self.undo.traces:
            return self._descend(module, name, self.undo.traces[name], events)
        try:
            traced = trace(module, self.root_unpassed if not name else None)
        except Exception as error:  # torch.fx's trace errors have no common base class
            return self._descend(module, name, error_summary(error), events)
        return self._graph(module, traced.graph_module, traced.opaque_leaves, name, events)

    def _graph(
        self, module: nn.Module, gm: fx.GraphModule, opaque: tuple[str, ...], name: str, events: list[PoolEvent]
    ) -> nn.Module:
        inside_opaque = {id(e) for leaf in opaque for e in self.recording.within(_join(name, leaf))}
        events = [e for e in events if id(e) not in inside_opaque]
        nodes = pool_nodes(gm)
        runs = _runs_of(name, events)
        mismatch = _mismatch(nodes, runs)
        if mismatch:
            return self._descend(module, name, mismatch, events)
        self.traced.append(name)
        replacements: dict[fx.Node, nn.Module] = {}
        calls_of: dict[str, int] = {}
        for k, pool in enumerate(nodes):
            node_events = [run[k] for run in runs]
            hooks_from: nn.Module | None = None
            if pool.node.op == "call_module":
                location = _join(name, str(pool.node.target))
                hooks_from = gm.get_submodule(str(pool.node.target))
                if module_uses(gm, pool.node.target) > 1:
                    calls_of[location] = calls_of.get(location, 0) + 1
                    location += f"#{calls_of[location] - 1}"
            else:
                location = f"{node_events[0].innermost or '<root>'}:{pool.node.name}"
            replacement = self._decide(pool.call, node_events, location)
            if replacement is not None:
                if hooks_from is not None:
                    carry_hooks(hooks_from, replacement)
                replacements[pool.node] = replacement
        if replacements:
            replace_nodes(gm, replacements, mirror=module)
            install_graph(module, gm)
            self.changed = True
        for leaf in opaque:  # hooked and scripted leaves: their calls stay as they are; convert below them
            child = module.get_submodule(leaf)
            new = self.module(child, _join(name, leaf))
            if new is not child:
                owner, _, attribute = leaf.rpartition(".")
                for tree in (module, gm):
                    setattr(tree.get_submodule(owner) if owner else tree, attribute, new)
        return module

    def _pool_module(self, module: nn.Module, name: str) -> nn.Module:
        # Swapped for one replacement, the module serves every parent that still calls it directly:
        # the calls under all its names, but those that a traced graph already replaced.
        aliases = {p for p in self.paths.get(id(module), [name]) if not self._under_traced(p)} | {name}
        events = [e for e in self.recording.events if e.module_name in aliases]
        call = describe_module(module)
        assert call is not None
        replacement = self._decide(call, events, name or "<root>")
        if replacement is None:
            return module
        carry_hooks(module, replacement)
        self.changed = True
        return replacement

    def _under_traced(self, path: str) -> bool:
        return any(t == "" or path == t or path.startswith(t + ".") for t in self.traced)

    def _descend(self, module: nn.Module, name: str, why: str | None, events: list[PoolEvent]) -> nn.Module:
        if why is not None:
            self.untraceable.append((name, why))
        for child_name, child in list(module.named_children()):
            new = self.module(child, _join(name, child_name))
            if new is not child:
                setattr(module, child_name, new)
        direct = [e for e in events if e.module_name is None and e.innermost == name]
        for k, event in enumerate(direct):
            self.records.append(
                _record(
                    event.call,
                    event,
                    f"{name or '<root>'}:{event.call.op}#{k}",
                    PoolDecision(
                        "left",
                        f"functional call inside the forward of {name or 'the model'}, which torch.fx cannot "
                        f"trace ({why}); move the call into a submodule, or make that forward traceable",
                    ),
                )
            )
        return module

    def _scripted(self, module: torch.jit.ScriptModule, name: str) -> None:
        for sub_name, sub in module.named_modules():
            if getattr(sub, "original_name", None) in POOL_CLASS_NAMES:
                self.records.append(
                    PoolRecord(
                        location=_join(name, sub_name) or "<root>",
                        form="module",
                        op=f"nn.{sub.original_name}",
                        input_shape=None,
                        output_size="?",
                        output_shape=None,
                        converted=False,
                        replacement="left to PyTorch",
                        reason="inside a TorchScript (torch.jit.script) submodule, which fxpool can neither see into "
                        "nor rewrite; script it after converting instead",
                        export_translated=sub.original_name.startswith("AdaptiveAvg"),
                        family="avg" if sub.original_name.startswith("AdaptiveAvg") else "max",
                    )
                )

    def _decide(self, call: PoolCall, events: Sequence[PoolEvent], location: str) -> nn.Module | None:
        decision = decide(
            call,
            events,
            location,
            dynamic=self.dynamic,
            fallback_device=self.fallback_device,
            undone=self.undo.replacements.get(location),
        )
        self.records.append(decision.record)
        return decision.replacement


@dataclass(frozen=True)
class Decision:
    """One pool's decision as convert applies it: its record, and the module that replaces it (None: left)."""

    record: PoolRecord
    replacement: nn.Module | None


def decide(
    call: PoolCall,
    events: Sequence[PoolEvent],
    location: str,
    *,
    dynamic: bool,
    fallback_device: torch.device,
    undone: str | None = None,
) -> Decision:
    """Decide one pool seen in ``events`` (one per run): planning's guards and rules, then its module.

    ``undone`` is why an earlier round of the self-check undid this pool's replacement.
    """
    event = events[0] if events else None
    decision = PoolDecision("left", undone) if undone else decide_pool(_sighting(call, events, location), dynamic)
    record = _record(call, event, location, decision)
    if decision.plan is None or event is None:
        return Decision(record, None)
    plan = decision.plan
    if decision.action == "dynamic":
        sizes = _requested_sizes(call, event, location) or event.output_shape[-event.spatial_dims :]
        pool_class = DynamicAdaptiveAvgPool if plan.family == "avg" else DynamicAdaptiveMaxPool
        replacement: nn.Module = pool_class(sizes, location=location)
    else:
        device = fallback_device if event.device.type == "meta" else event.device
        weight_dtype = torch.float64 if event.dtype == torch.float64 else torch.float32
        replacement = ExactAdaptivePool(
            plan, location, weight_dtype, device, batched=len(event.input_shape) == event.spatial_dims + 2
        )
    replacement.train(False)  # replacements hold no training-dependent state; keep them out of train mode
    return Decision(record, replacement)


_DYNAMIC_DESCRIPTIONS = {
    "avg": "dynamic matmul (windows from the runtime size)",
    "max": "dynamic masked max (windows from the runtime size)",
}


def _requested_sizes(call: PoolCall, event: PoolEvent, location: str) -> tuple[int | None, ...] | None:
    """The output size per spatial axis as the model asks for it; None for a scale_factor or a computed size."""
    if call.output_size is None or call.dynamic_output_size:
        return None
    # interpolate's int size is every axis's, as a pool's output_size is
    return normalize_output_size(call.output_size, event.spatial_dims, location)


def _sighting(call: PoolCall, events: Sequence[PoolEvent], location: str) -> PoolSighting:
    if not events:
        return PoolSighting(call.family, (), None, call.return_indices, call.dynamic_output_size)
    dims = events[0].spatial_dims
    return PoolSighting(
        call.family,
        tuple((e.input_shape[-dims:], e.output_shape[-dims:]) for e in events),
        _requested_sizes(call, events[0], location),
        call.return_indices,
        call.dynamic_output_size,
        events[0].quantized,
    )


def _record(call: PoolCall, event: PoolEvent | None, location: str, decision: PoolDecision) -> PoolRecord:
    plan = decision.plan
    converted = decision.action != "left"
    if plan is None or not converted:
        replacement, kind = "left to PyTorch", ""
    elif decision.action == "dynamic":
        replacement, kind = _DYNAMIC_DESCRIPTIONS[plan.family], "dynamic"
    else:
        replacement, kind = plan.describe(), plan.kind
    output_size = call.requested
    if call.output_size is None and not call.dynamic_output_size and event is not None:
        output_size = f"scale_factor: {event.output_shape[-event.spatial_dims :]}"
    return PoolRecord(
        location=location,
        form=call.form,
        op=call.op,
        input_shape=None if event is None else event.input_shape,
        output_size=output_size,
        output_shape=None if event is None else event.output_shape,
        converted=converted,
        replacement=replacement,
        reason=decision.reason,
        size_agnostic=decision.action == "dynamic" or (plan is not None and converted and plan.size_agnostic),
        source=None if event is None else event.source,
        export_translated=not converted and call.family == "avg" and not (event is not None and event.quantized),
        family=call.family,
        kind=kind,
    )


def _runs_of(name: str, events: list[PoolEvent]) -> list[list[PoolEvent]]:
    """The events of each call of module ``name``, in order: one list per call."""
    runs: dict[int, list[PoolEvent]] = {}
    for event in events:
        invocation = next(count for n, count in event.scope if n == name)
        runs.setdefault(invocation, []).append(event)
    return [runs[i] for i in sorted(runs)]


def _mismatch(nodes: list, runs: list[list[PoolEvent]]) -> str | None:
    expected = [pool.call.op for pool in nodes]
    for run in runs:
        seen = [event.call.op for event in run]
        if seen != expected:
            return (
                f"the traced graph has pools {expected} but the example run called {seen}; "
                f"the forward takes a different path when traced"
            )
    return None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
