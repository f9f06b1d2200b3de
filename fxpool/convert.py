"""``convert`` and ``plan``: find every adaptive pool of a model and replace it exactly.

The steps, each in its own module:

1. :func:`~fxpool.recording.record_pool_calls` runs the model once, without side effects, and
   records every pool call with its input and output sizes;
2. the model's module tree is copied over the same tensors (:func:`~fxpool.copying.structural_copy`);
3. the copy is traced whole with torch.fx; where that fails, the largest submodules that do trace
   are converted instead, pool modules inside untraceable code are swapped directly, and
   functional calls that neither reaches are reported;
4. each pool node is matched with its recorded call, :func:`~fxpool.planning.choose_plan` picks
   its replacement and :func:`~fxpool.graph_pass.replace_nodes` swaps it in.

Every decision becomes a :class:`~fxpool.report.PoolRecord`.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import fx, nn

from .calls import PoolCall, describe_module
from .copying import structural_copy
from .errors import UnconvertedPoolError
from .graph_pass import module_uses, pool_nodes, replace_nodes, trace
from .planning import choose_plan
from .recording import PoolEvent, Recording, normalize_example, record_pool_calls
from .dynamic import DynamicAdaptiveAvgPool
from .replacements import ExactAdaptivePool
from .report import REPORT_ATTRIBUTE, ConversionReport, PoolRecord


def convert(model: nn.Module, example_input: Any, *, strict: bool = False, dynamic: bool = False) -> nn.Module:
    """Return a model that computes the same function with every adaptive pool replaced exactly.

    ``example_input`` follows ``torch.onnx.export``'s ``args``: a tensor, a tuple of positional
    arguments, or any other single first argument (a list of images, a dict). Replacements are
    specialised to the spatial sizes this input produces and raise
    :class:`~fxpool.errors.SpatialSizeError` on other sizes, unless ``dynamic=True``, under which
    every pool computes its windows from the size it is given.

    The caller's model is never changed. The result shares its parameters and buffers (the same
    tensors, no copy) and copies only the module objects; :func:`~fxpool.report.report_of` gives
    its :class:`~fxpool.report.ConversionReport`. With ``strict=True`` any pool that would be left
    to PyTorch raises :class:`~fxpool.errors.UnconvertedPoolError` instead.

    >>> import torch, torchvision
    >>> converted = convert(torchvision.models.vgg11(weights=None), torch.randn(1, 3, 160, 160))
    >>> print(report_of(converted).records[0].replacement)
    kron-matmul HW 5x5->7x7
    """
    converted, report = _convert(model, example_input, dynamic)
    if strict and report.unconverted:
        raise UnconvertedPoolError(
            f"strict=True and {len(report.unconverted)} adaptive pool(s) would be left to PyTorch:\n"
            + ConversionReport(report.unconverted).table()
        )
    setattr(converted, REPORT_ATTRIBUTE, report)
    return converted


def plan(model: nn.Module, example_input: Any, *, dynamic: bool = False) -> ConversionReport:
    """The report ``convert`` would produce, without handing back a converted model."""
    return _convert(model, example_input, dynamic)[1]


def _convert(model: nn.Module, example_input: Any, dynamic: bool) -> tuple[nn.Module, ConversionReport]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxpool.convert needs an nn.Module, got {type(model).__name__}")
    args = normalize_example(example_input)
    recording = record_pool_calls(model, args)
    conversion = _Conversion(recording, dynamic)
    converted = conversion.module(structural_copy(model), "")
    report = ConversionReport(tuple(conversion.records), tuple(conversion.traced), tuple(conversion.untraceable))
    return converted, report


class _Conversion:
    """Walks the module tree top-down, converting the largest parts that trace."""

    def __init__(self, recording: Recording, dynamic: bool) -> None:
        self.recording = recording
        self.dynamic = dynamic
        self.records: list[PoolRecord] = []
        self.traced: list[str] = []
        self.untraceable: list[tuple[str, str]] = []
        self.done: dict[int, nn.Module] = {}

    def module(self, module: nn.Module, name: str) -> nn.Module:
        if id(module) in self.done:  # a submodule shared by two parents is converted once
            return self.done[id(module)]
        events = self.recording.within(name)
        if not events:
            result = module
        elif describe_module(module) is not None:
            result = self._pool_module(module, name)
        else:
            try:
                gm = trace(module)
            except Exception as error:  # torch.fx's trace errors have no common base class
                result = self._descend(module, name, _first_line(error), events)
            else:
                result = self._graph(module, gm, name, events)
        self.done[id(module)] = result
        return result

    def _graph(self, module: nn.Module, gm: fx.GraphModule, name: str, events: list[PoolEvent]) -> nn.Module:
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
            if pool.node.op == "call_module":
                location = _join(name, str(pool.node.target))
                if module_uses(gm, pool.node.target) > 1:
                    calls_of[location] = calls_of.get(location, 0) + 1
                    location += f"#{calls_of[location] - 1}"
            else:
                location = f"{node_events[0].innermost or '<root>'}:{pool.node.name}"
            replacement = self._decide(pool.call, node_events, location)
            if replacement is not None:
                replacements[pool.node] = replacement
        if not replacements:
            return module
        result = replace_nodes(gm, replacements).graph_module
        _keep_plain_attributes(module, result)
        return result

    def _pool_module(self, module: nn.Module, name: str) -> nn.Module:
        events = [e for e in self.recording.events if e.module_name == name]
        call = describe_module(module)
        assert call is not None
        replacement = self._decide(call, events, name or "<root>")
        return module if replacement is None else replacement

    def _descend(self, module: nn.Module, name: str, why: str, events: list[PoolEvent]) -> nn.Module:
        self.untraceable.append((name, why))
        for child_name, child in list(module.named_children()):
            new = self.module(child, _join(name, child_name))
            if new is not child:
                setattr(module, child_name, new)
        direct = [e for e in events if e.module_name is None and e.innermost == name]
        for k, event in enumerate(direct):
            self.records.append(_record(
                event, f"{name or '<root>'}:{event.call.op}#{k}", None,
                f"functional call inside the forward of {name or 'the model'}, which torch.fx cannot trace "
                f"({why}); move the call into a submodule, or make that forward traceable",
            ))
        return module

    def _decide(self, call: PoolCall, events: Sequence[PoolEvent], location: str) -> nn.Module | None:
        """The replacement of one pool seen in ``events`` (one per run), recording the decision."""
        event = events[0]
        why_not = _why_not(call, events)
        if why_not:
            self.records.append(_record(event, location, None, why_not, call))
            return None
        dims = event.spatial_dims
        in_sizes = event.input_shape[-dims:]
        out_sizes = event.output_shape[-dims:]
        follows = tuple(s is None for s in call.output_size) if call.output_size else (False,) * dims
        pool_plan = choose_plan(call.family, in_sizes, out_sizes, follows)
        weight_dtype = torch.float64 if event.dtype == torch.float64 else torch.float32
        if self.dynamic and not pool_plan.size_agnostic:
            why_not_dynamic = _why_not_dynamic(call)
            if why_not_dynamic:
                self.records.append(_record(event, location, None, why_not_dynamic, call))
                return None
            replacement: nn.Module = DynamicAdaptiveAvgPool(call.output_size or out_sizes, where=location)
            description = "dynamic matmul (windows from the runtime size)"
            reason = "dynamic=True; at the traced size: " + pool_plan.reasons()
            agnostic = True
        else:
            replacement = ExactAdaptivePool(pool_plan, location, weight_dtype, event.device,
                                            batched=len(event.input_shape) == dims + 2)
            description = pool_plan.describe()
            reason = pool_plan.reasons()
            agnostic = pool_plan.size_agnostic
        self.records.append(PoolRecord(
            location=location, form=call.form, op=call.op, input_shape=event.input_shape,
            output_size=call.requested if call.output_size is not None else str(out_sizes),
            output_shape=event.output_shape, converted=True, replacement=description, reason=reason,
            size_agnostic=agnostic, source=event.source,
        ))
        return replacement


def _why_not(call: PoolCall, events: Sequence[PoolEvent]) -> str | None:
    if not events:
        return "never ran on the example input, so its input size is unknown"
    event = events[0]
    if call.dynamic_output_size:
        return "output_size is computed at run time, so no fixed replacement is safe"
    if call.return_indices:
        return "return_indices=True: PyTorch's argmax indices (and their ties) are not reproduced"
    if event.quantized:
        return "quantized input: left to the quantized kernel"
    dims = event.spatial_dims
    if 0 in event.output_shape[-dims:] or 0 in event.input_shape[-dims:]:
        return "a zero spatial size makes an empty result; nothing to replace"
    sizes = {(e.input_shape[-dims:], e.output_shape[-dims:]) for e in events}
    if len(sizes) > 1:
        seen = ", ".join(f"{i}->{o}" for i, o in sorted(sizes))
        return f"called {len(events)} times with different sizes ({seen}); no single replacement is exact"
    return None


def _why_not_dynamic(call: PoolCall) -> str | None:
    if call.family != "avg":
        return "dynamic=True covers the average family; this max pool depends on its input size"
    if call.output_size is None:
        return "dynamic=True: interpolate with scale_factor has a size-dependent output size"
    return None


def _record(event: PoolEvent, location: str, replacement: str | None, reason: str,
            call: PoolCall | None = None) -> PoolRecord:
    call = call or event.call
    return PoolRecord(
        location=location, form=call.form, op=call.op, input_shape=event.input_shape,
        output_size=call.requested, output_shape=event.output_shape, converted=False,
        replacement=replacement or "left to PyTorch", reason=reason, source=event.source,
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
            return (f"the traced graph has pools {expected} but the example run called {seen}; "
                    f"the forward takes a different path when traced")
    return None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()


def _keep_plain_attributes(original: nn.Module, gm: fx.GraphModule) -> None:
    """Carry plain attributes (``out_channels`` and the like) that callers may read over to the graph."""
    for key, value in vars(original).items():
        if key.startswith("_") or key == "training" or hasattr(gm, key):
            continue
        if isinstance(value, (nn.Module, torch.Tensor)):
            continue
        setattr(gm, key, value)
