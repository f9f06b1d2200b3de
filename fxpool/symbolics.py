"""Exporter-level translations of adaptive average pooling, for pools no graph pass can reach.

Some models take another code path under export (``if torch.onnx.is_in_onnx_export(): ...``) or pool in code neither
torch.fx nor hooks see. :func:`exporter_translations` registers a TorchScript-exporter symbolic for
``aten::adaptive_avg_pool1d/2d/3d`` for its duration, and :func:`dynamo_translation_table` gives the dynamo exporter's
entries for the same ops. Both emit one exact form (:func:`_lower`): where the exporter knows the spatial sizes, the
:class:`~fxpool.steps.PoolPlan` a converted model would get, lowered step by step; an axis of dynamic length pooled
from window positions built from its runtime length (:func:`_lower_dynamic`). Every form sums only a window's entries,
so NaN and ±inf stay in their windows; half and bfloat16 are summed in float32."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .forms import sliding_window_indices, window_gather_indices, window_scales
from .planning import choose_plan
from .steps import (
    PoolPlan,
    PoolStep,
    ReduceStep,
    SlidingWindowStep,
    UpsampleStep,
    WindowGatherStep,
    WindowScaleStep,
    WindowSlicesStep,
)
from .windows import window_bounds

_OPSET = 9
_OPS = {1: "aten::adaptive_avg_pool1d", 2: "aten::adaptive_avg_pool2d", 3: "aten::adaptive_avg_pool3d"}


class _Ops:
    """The ONNX ops :func:`_lower` builds, spelled for the opset being exported: the TorchScript exporter's
    symbolic is registered from opset 9 on, and ops whose attributes became inputs (Slice in 10, Pad in 11, the
    axes of `_AXES_INPUT_SINCE`) take them as constants from then on."""

    opset = 18

    def op(self, name: str, *inputs: Any, **attributes: Any) -> Any:
        raise NotImplementedError

    def constant(self, value: torch.Tensor) -> Any:
        raise NotImplementedError

    def with_axes(self, name: str, x: Any, axes: list[int], **attributes: Any) -> Any:
        """``name`` over ``axes`` of ``x``: an attribute before opset ``_AXES_INPUT_SINCE[name]``, an input from it on."""
        if self.opset >= _AXES_INPUT_SINCE[name]:
            return self.op(name, x, self.constant(torch.tensor(axes)), **attributes)
        return self.op(name, x, axes=axes, **attributes)

    def slice(self, x: Any, start: int, end: int, axis: int) -> Any:
        if self.opset >= 10:
            return self.op("Slice", x, *[self.constant(torch.tensor([v])) for v in (start, end, axis)])
        return self.op("Slice", x, starts=[start], ends=[end], axes=[axis])

    def pad_end(self, x: Any, axis: int, rank: int) -> Any:
        """One zero appended to axis ``axis``."""
        pads = [0] * (2 * rank)
        pads[rank + axis] = 1
        if self.opset >= 11:
            return self.op("Pad", x, self.constant(torch.tensor(pads)), mode="constant")
        return self.op("Pad", x, pads=pads, mode="constant", value=0.0)

    def size(self, x: Any, axis: int) -> Any:
        """The length of axis ``axis`` of ``x``, an int64 scalar."""
        return self.op("Gather", self.op("Shape", x), self.constant(torch.tensor(axis)), axis=0)

    def arange(self, length: Any) -> Any:
        return self.op("Range", self.constant(torch.tensor(0)), length, self.constant(torch.tensor(1)))

    def reshape(self, x: Any, shape: list[int]) -> Any:
        return self.op("Reshape", x, self.constant(torch.tensor(shape)))

    def cast(self, x: Any, dtype: torch.dtype) -> Any:
        return self.op("Cast", x, to=_ONNX_DTYPES[dtype])

    def gather(self, x: Any, indices: torch.Tensor, axis: int) -> Any:
        return self.op("Gather", x, self.constant(indices), axis=axis)


class _TorchScriptOps(_Ops):
    """In the TorchScript exporter's graph builder, whose attribute names end in their type (``axis_i``)."""

    def __init__(self, g: Any) -> None:
        self.g = g
        self.opset = getattr(g, "opset", _OPSET)

    def op(self, name: str, *inputs: Any, **attributes: Any) -> Any:
        kinds = {str: "s", float: "f", torch.Tensor: "t"}
        return self.g.op(name, *inputs, **{f"{key}_{kinds.get(type(v), 'i')}": v for key, v in attributes.items()})

    def constant(self, value: torch.Tensor) -> Any:
        return self.op("Constant", value=value)


class _OnnxScriptOps(_Ops):
    """In onnxscript (opset 18), for the dynamo exporter's custom translations."""

    def __init__(self) -> None:
        from onnxscript import opset18

        self.onnx = opset18

    def op(self, name: str, *inputs: Any, **attributes: Any) -> Any:
        return getattr(self.onnx, name)(*inputs, **attributes)

    def constant(self, value: torch.Tensor) -> Any:
        import onnx

        return self.op("Constant", value=onnx.numpy_helper.from_array(value.numpy()))


# The opset from which each op takes its axes as an input, not an attribute.
_AXES_INPUT_SINCE = {"ReduceMean": 18, "ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13}
# onnx.TensorProto's element types, without importing onnx where the TorchScript exporter runs.
_ONNX_DTYPES = {torch.float32: 1, torch.int64: 7, torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}
_LOW_PRECISION = (torch.float16, torch.bfloat16)
# The element types other than float32 that _lower tells apart, by the exporters' names upper-cased ("Half", "FLOAT16").
_DTYPE_NAMES = {"DOUBLE": torch.float64, "HALF": torch.float16, "FLOAT16": torch.float16, "BFLOAT16": torch.bfloat16}


def _lower(ops: _Ops, x: Any, sizes: Sequence[Any], requested: Any, dims: int, dtype: torch.dtype) -> Any:
    """Exact adaptive average pooling of ``x`` to ``requested`` in portable ONNX. ``sizes`` is ``x``'s shape as the
    exporter knows it (``None``: dynamic); ``requested`` holds ints, ``None`` (the input's own length) or an int64
    scalar of the graph (an interpolate ``scale_factor`` over a dynamic axis)."""
    if not sizes or len(sizes) < dims:
        raise ValueError(
            f"fxpool: adaptive_avg_pool{dims}d needs the input's rank to export; the exporter knows its shape "
            f"only as {list(sizes)}. Convert with fxpool.convert(..., dynamic=True) before exporting."
        )
    requested = (
        [requested] * dims if isinstance(requested, int) else (list(requested) if isinstance(requested, (list, tuple)) else [])
    )
    if len(requested) != dims:
        raise ValueError(
            f"fxpool: adaptive_avg_pool{dims}d's output size is not known when exporting; pass a "
            f"fixed output size, or keep the spatial axes static."
        )
    in_sizes = tuple(s if isinstance(s, int) else None for s in sizes[-dims:])
    out_sizes = tuple(i if o is None or (isinstance(o, int) and o == -1) else o for i, o in zip(in_sizes, requested))
    rank, batched = len(sizes), len(sizes) == dims + 2  # ONNX pooling wants (N, C, spatial...)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    if dtype in _LOW_PRECISION:
        x = ops.cast(x, compute)
    if all(o == 1 for o in out_sizes) and batched:
        pooled = ops.op("GlobalAveragePool", x)  # exact at any size
    elif None not in in_sizes and all(isinstance(o, int) for o in out_sizes):
        plan = choose_plan("avg", in_sizes, out_sizes, tuple(o is None for o in requested))  # type: ignore[arg-type]
        pooled = _lower_plan(ops, x, plan, rank, batched, compute)
    else:
        pooled = _lower_dynamic(ops, x, in_sizes, requested, rank, compute)
    return ops.cast(pooled, dtype) if dtype in _LOW_PRECISION else pooled


def _lower_plan(ops: _Ops, x: Any, plan: PoolPlan, rank: int, batched: bool, dtype: torch.dtype) -> Any:
    """``plan``'s steps in its order, as a converted model exports them (weights in ``dtype``)."""
    dims = plan.spatial_dims
    if not batched:
        x, rank = ops.with_axes("Unsqueeze", x, [0]), rank + 1
    first = rank - dims  # position of the first spatial axis
    for step in plan.steps:
        if isinstance(step, PoolStep):
            x = _average_pool(ops, x, list(step.kernel), list(step.stride))
        elif isinstance(step, ReduceStep):
            if len(step.axes) == dims:
                x = ops.op("GlobalAveragePool", x)
            else:
                x = ops.with_axes("ReduceMean", x, [first + a for a in step.axes], keepdims=1)
        elif isinstance(step, SlidingWindowStep) and dtype != torch.float64:  # onnxruntime has no float64 AveragePool
            blocks = []
            for length in step.lengths:
                kernel = [1] * dims
                kernel[step.axis] = length
                blocks.append(x if length == 1 else _average_pool(ops, x, kernel, [1] * dims))
            joined = ops.op("Concat", *blocks, axis=first + step.axis) if len(blocks) > 1 else blocks[0]
            x = ops.gather(joined, sliding_window_indices(step.in_size, step.out_size, step.lengths), first + step.axis)
        elif isinstance(step, (SlidingWindowStep, WindowSlicesStep)):
            position = first + step.axis
            windows = window_bounds(step.in_size, step.out_size)
            means = [ops.with_axes("ReduceMean", ops.slice(x, a, b, position), [position], keepdims=1) for a, b in windows]
            x = ops.op("Concat", *means, axis=position)
        elif isinstance(step, WindowGatherStep):
            padded = ops.pad_end(x, first + step.axis, rank) if step.zero_padded else x
            indices = window_gather_indices(step.in_size, step.out_size, step.span, step.zero_padded)
            x = ops.gather(padded, indices, first + step.axis)
        elif isinstance(step, WindowScaleStep):
            scales = window_scales(step.in_size, step.out_size, step.span).to(dtype)
            x = ops.op("Mul", x, ops.constant(scales.reshape((-1,) + (1,) * (dims - 1 - step.axis))))
        elif isinstance(step, UpsampleStep):  # nearest by an integer factor: each position repeated
            for axis, size in enumerate(step.sizes):
                if size is not None and size != plan.in_sizes[axis]:
                    repeated = torch.arange(size) * plan.in_sizes[axis] // size
                    x = ops.gather(x, repeated, first + axis)
        else:
            raise TypeError(f"fxpool: an average pool's plan has no ONNX lowering for step {step!r}")
    return x if batched else ops.with_axes("Squeeze", x, [0])


def _average_pool(ops: _Ops, x: Any, kernel: list[int], stride: list[int]) -> Any:
    """An AveragePool of ``(N, C, *spatial)``; in 1d and 3d as 2d ones, as converted models export them
    (:func:`~fxpool.forms.avg_pool_as_2d`: onnxruntime's AveragePool from opset 19 walks 1d and 3d windows slowly)."""
    if len(kernel) == 2:
        return ops.op("AveragePool", x, kernel_shape=kernel, strides=stride)
    if len(kernel) == 1:  # over planes of height 1
        planes = ops.with_axes("Unsqueeze", x, [2])
        return ops.with_axes("Squeeze", ops.op("AveragePool", planes, kernel_shape=[1, *kernel], strides=[1, *stride]), [2])
    minus_one = ops.constant(torch.tensor([-1]))
    shape = ops.op("Shape", x)
    planes = ops.op("Reshape", x, ops.op("Concat", ops.slice(shape, 0, 1, 0), minus_one, ops.slice(shape, 3, 5, 0), axis=0))
    planes = ops.op("AveragePool", planes, kernel_shape=kernel[1:], strides=stride[1:])  # H and W of every (N, C, D) plane
    columns = ops.op("Reshape", planes, ops.op("Concat", ops.slice(shape, 0, 3, 0), minus_one, axis=0))  # (N, C, D, H'W')
    columns = ops.op("AveragePool", columns, kernel_shape=[kernel[0], 1], strides=[stride[0], 1])  # D
    target = ops.op("Concat", ops.slice(ops.op("Shape", columns), 0, 3, 0), ops.slice(ops.op("Shape", planes), 2, 4, 0), axis=0)
    return ops.op("Reshape", columns, target)


def _lower_dynamic(ops: _Ops, x: Any, in_sizes: tuple[int | None, ...], requested: list[Any], rank: int, dtype: torch.dtype) -> Any:
    """Per pooled axis, every window's ``(out, span)`` block of entries (:func:`_runtime_windows`), those past its
    end masked to zero by Where (not a product: a non-finite entry stays in its windows), summed and divided by
    the window's length: linear in the input, as ``dynamic=True``'s blocks under ``torch.export``."""
    dims = len(in_sizes)
    for axis, (i, o) in enumerate(zip(in_sizes, requested)):
        if o is None or (isinstance(o, int) and o in (-1, i)):  # the output is the input's length: nothing to pool
            continue
        position = rank - dims + axis
        positions, inside, count = _runtime_windows(ops, x, position, o, dtype)  # (out, span), (out, span), (out,)
        for trailing in range(rank - 1 - position):  # the mask broadcasts over the axes after the pooled one
            inside = ops.with_axes("Unsqueeze", inside, [2 + trailing])
        windows = ops.op("Gather", x, positions, axis=position)  # (..., out, span, ...)
        selected = ops.op("Where", inside, windows, ops.constant(torch.tensor(0, dtype=dtype)))
        summed = ops.with_axes("ReduceSum", selected, [position + 1], keepdims=0)  # (..., out, ...)
        x = ops.op("Div", summed, ops.reshape(count, [-1] + [1] * (rank - 1 - position)))
    return x


def _runtime_windows(ops: _Ops, x: Any, position: int, out_size: Any, dtype: torch.dtype) -> tuple[Any, Any, Any]:
    """Every window's positions along axis ``position`` of ``x``, ``(out, span)`` with ``span = ceil(L/out) + 1``
    (no window is longer), a window's last repeated past its end; whether each lies inside its window; and each
    window's length, built in the graph by integer division of non-negative int64s (``out_size``: an int or an
    int64 scalar of the graph)."""
    add, sub, mul, div = (functools.partial(ops.op, name) for name in ("Add", "Sub", "Mul", "Div"))

    def const(value: int) -> Any:
        return ops.constant(torch.tensor(value))

    length = ops.size(x, position)
    if isinstance(out_size, int):
        out, i = const(out_size), ops.constant(torch.arange(out_size))  # (out,)
    else:
        out = ops.cast(out_size, torch.int64)  # the TorchScript exporter may compute it in floats
        i = ops.arange(out)
    rounding = sub(out, const(1))
    start = div(mul(i, length), out)
    end = div(add(mul(add(i, const(1)), length), rounding), out)
    span = add(div(add(length, rounding), out), const(1))
    positions = add(ops.reshape(start, [-1, 1]), ops.reshape(ops.arange(span), [1, -1]))  # (out, span)
    last = ops.reshape(sub(end, const(1)), [-1, 1])
    inside = ops.op("Less", positions, ops.reshape(end, [-1, 1]))
    return ops.op("Where", inside, positions, last), inside, ops.cast(sub(end, start), dtype)


def _symbolic(dims: int) -> Callable[[Any, Any, Any], Any]:
    def symbolic(g: Any, x: Any, output_size: Any) -> Any:
        from torch.onnx import symbolic_helper

        sizes = symbolic_helper._get_tensor_sizes(x) or []
        requested = _torchscript_output_size(output_size, x, len(sizes), dims)
        try:
            return _lower(_TorchScriptOps(g), x, sizes, requested, dims, _torchscript_dtype(x))
        except ValueError as error:
            raise torch.onnx.errors.SymbolicValueError(str(error), x) from error

    return symbolic


def _torchscript_output_size(output_size: Any, x: Any, rank: int, dims: int) -> Any:
    """The output size as ints, ``None`` where an entry is ``x``'s own length on that axis.

    A ``None`` in ``output_size`` reaches the exporter as ``x.size(axis)``, which a dynamic axis leaves as Shape and
    Gather; other entries not constant stay graph values."""
    from torch.onnx import symbolic_helper

    constant = symbolic_helper._maybe_get_const(output_size, "is")
    if isinstance(constant, (int, list, tuple)):
        return constant
    node = output_size.node()
    if node.kind() != "prim::ListConstruct":
        return []
    entries: list[int | None] = []
    for position, entry in enumerate(node.inputs(), start=rank - dims):
        value = symbolic_helper._maybe_get_const(entry, "i")
        if isinstance(value, int):
            entries.append(value)
            continue
        gather = entry.node()
        inputs = list(gather.inputs())
        follows = (
            gather.kind() == "onnx::Gather"
            and len(inputs) == 2
            and inputs[0].node().kind() == "onnx::Shape"
            and next(inputs[0].node().inputs()).unique() == x.unique()
            and symbolic_helper._maybe_get_const(inputs[1], "i") == position
        )
        entries.append(None if follows else entry)  # else computed in the graph: an int64 scalar
    return entries


def _torchscript_dtype(x: Any) -> torch.dtype:
    try:
        name = x.type().scalarType()
    except RuntimeError:  # no tensor type recorded
        name = None
    return _DTYPE_NAMES.get(str(name).upper(), torch.float32)


def _translation(dims: int) -> Callable[..., Any]:
    def translation(x: Any, output_size: Sequence[int]) -> Any:
        sizes = [d if isinstance(d, int) else None for d in x.shape] if x.shape is not None else []
        dtype = _DTYPE_NAMES.get(getattr(x.dtype, "name", ""), torch.float32)
        return _lower(_OnnxScriptOps(), x, sizes, list(output_size), dims, dtype)

    return translation


def dynamo_translation_table() -> dict[Any, Callable[..., Any]]:
    """``custom_translation_table`` entries for the dynamo exporter's adaptive average pool ops."""
    aten = torch.ops.aten
    return {
        aten.adaptive_avg_pool1d.default: _translation(1),
        aten.adaptive_avg_pool2d.default: _translation(2),
        aten._adaptive_avg_pool2d.default: _translation(2),
        aten.adaptive_avg_pool3d.default: _translation(3),
        aten._adaptive_avg_pool3d.default: _translation(3),
    }


_active = 0  # nesting depth: fxpool.export inside onnx_export_hook enters twice


@contextmanager
def exporter_translations() -> Iterator[None]:
    """Register fxpool's TorchScript-exporter symbolics for adaptive average pooling while inside (re-entrant)."""
    global _active
    _active += 1
    try:
        if _active == 1:
            for dims, name in _OPS.items():
                torch.onnx.register_custom_op_symbolic(name, _symbolic(dims), _OPSET)
        yield
    finally:
        _active -= 1
        if _active == 0:
            for name in _OPS.values():
                torch.onnx.unregister_custom_op_symbolic(name, _OPSET)
