"""The proof: the native adaptive pool operators a tracer still sees in a converted model: ``torch.jit.trace`` as the
TorchScript exporter traces (the strictest); where it cannot trace the model, one run under a ``TorchDispatchMode``
that sees the ATen operators ``torch.export`` records, the replacements in their traced forms."""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .calls import ATEN_FORMS
from .checking import isolated_run
from .example import Example
from .globalstate import export_flag
from .report import ConversionReport, PoolRecord
from .sizechecks import traced_forms

JIT_TRACER = "torch.jit.trace (tracing as the TorchScript ONNX exporter does)"
DISPATCH_TRACER = "an ATen dispatch run (the operators torch.export records)"
# The ATen names of the adaptive pools, as TorchScript graphs spell their node kinds, by operator.
ATEN_KINDS = {op: f"aten::{str(op).split('.')[1]}" for op in ATEN_FORMS}
_JIT_KINDS = {kind: ATEN_FORMS[op] for op, kind in ATEN_KINDS.items()}


@dataclass(frozen=True)
class NativePool:
    """One native adaptive pool operator a tracer found in the converted model."""

    op: str  # "aten::adaptive_avg_pool2d"
    family: str
    scope: str  # the module path the tracer puts it in ("" for the root or unknown)
    input_shape: tuple[int, ...] | None
    output_shape: tuple[int, ...] | None


@dataclass(frozen=True)
class TracedPools:
    """The native pools a tracer found, and which tracer."""

    tracer: str
    pools: tuple[NativePool, ...]


def traced_pools(model: nn.Module, example: Example) -> TracedPools:
    """The native adaptive pool operators a tracer sees in ``model`` run on ``example``; ``tracer`` is "" where
    neither could run it (one that raises under the export flag, as its original does): nothing was proven then."""
    with contextlib.suppress(Exception):  # the tracer's limits (dict outputs with strings, data-dependent code...)
        return TracedPools(JIT_TRACER, _jit_pools(model, example))
    with contextlib.suppress(Exception):
        return TracedPools(DISPATCH_TRACER, _dispatched_pools(model, example))
    return TracedPools("", ())


@contextlib.contextmanager
def _traced_run(model: nn.Module, example: Example) -> Iterator[None]:
    """The check's isolated run, with the export flag up and the tracers' warnings (about the model) held back."""
    with isolated_run(model, example), export_flag(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _jit_pools(model: nn.Module, example: Example) -> tuple[NativePool, ...]:
    with _traced_run(model, example):
        kwargs = dict(example.kwargs) or None
        traced = torch.jit.trace(model, example.args, strict=False, check_trace=False, example_kwarg_inputs=kwargs)
    found = []
    for node in jit_nodes(traced.inlined_graph.nodes()):
        form = _JIT_KINDS.get(node.kind())
        if form is None:
            continue
        inputs, outputs = list(node.inputs()), list(node.outputs())
        in_shape, out_shape = _shape(inputs[0]), (_shape(outputs[0]) if outputs else None)
        scope = node.scopeName().split("/")[-1].removeprefix("__module.").removeprefix("__module")  # "features.5"
        found.append(NativePool(node.kind(), form.family, scope, in_shape, out_shape))
    return tuple(found)


def jit_nodes(nodes: Any) -> Iterator[Any]:
    """TorchScript graph nodes, those inside if/loop blocks too."""
    for node in nodes:
        yield node
        for block in node.blocks():
            yield from jit_nodes(block.nodes())


def _shape(value: Any) -> tuple[int, ...] | None:
    sizes = getattr(value.type(), "sizes", lambda: None)()
    return tuple(sizes) if sizes is not None and all(isinstance(s, int) for s in sizes) else None


class _RecordPools(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[NativePool] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        form = ATEN_FORMS.get(func)
        if form is not None:
            x = args[0] if args else None
            values = result[0] if isinstance(result, tuple) else result
            in_shape, out_shape = (tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in (x, values))
            self.found.append(NativePool(ATEN_KINDS[func], form.family, "", in_shape, out_shape))
        return result


def _dispatched_pools(model: nn.Module, example: Example) -> tuple[NativePool, ...]:
    recorder = _RecordPools()
    with _traced_run(model, example), traced_forms(), recorder:
        example.call(model)
    return tuple(recorder.found)


def proven(report: ConversionReport, traced: TracedPools) -> ConversionReport:
    """``report`` with what ``traced`` saw: its tracer named, and a record left to PyTorch for every native pool no
    record accounts for (a record left to PyTorch accounts for one native pool per call, matched by family and
    shapes, or by family alone where the record's or the tracer's shapes are unknown)."""
    left = [r for r in report.unconverted for _ in range(max(r.calls, 1))]
    expected: Counter[tuple[Any, ...]] = Counter(
        (r.family, r.input_shape, r.output_shape) for r in left if r.input_shape is not None
    )
    unseen = Counter(r.family for r in left if r.input_shape is None)
    extra: list[PoolRecord] = []
    for pool in sorted(traced.pools, key=lambda p: p.input_shape is None):  # the pools of known shapes first
        key = (pool.family, pool.input_shape, pool.output_shape)
        if pool.input_shape is None:  # shapes the tracer does not know: any record left of its family
            key = next((k for k, n in expected.items() if n > 0 and k[0] == pool.family), key)
        if expected[key] > 0:
            expected[key] -= 1
        elif unseen[pool.family] > 0:
            unseen[pool.family] -= 1
        else:
            extra.append(_record_of(pool, traced.tracer))
    return replace(report, records=report.records + tuple(extra), proved_by=traced.tracer)


def _record_of(pool: NativePool, tracer: str) -> PoolRecord:
    dims = int(pool.op[-2])  # "aten::adaptive_avg_pool2d": 2
    spatial = pool.output_shape[-dims:] if pool.output_shape is not None else None
    return PoolRecord(
        location=f"{pool.scope or '<root>'}:{pool.op}",
        form="traced",
        op=pool.op,
        input_shape=pool.input_shape,
        output_size=str(spatial) if spatial is not None else "?",
        output_shape=pool.output_shape,
        converted=False,
        replacement="left to PyTorch",
        reason=(
            f"{tracer} still finds {pool.op} here in the converted model: a pool call fxpool's run did not see or "
            f"could not match, so the exporters would meet PyTorch's pool (please report the model)"
        ),
        export_translated=pool.family == "avg",
        family=pool.family,
        global_output=spatial is not None and all(size == 1 for size in spatial),
    )
