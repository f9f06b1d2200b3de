"""Exporter-level translations of adaptive average pooling, for pools no graph pass can reach.

Some models take another code path under export (``if torch.onnx.is_in_onnx_export(): ...``) or
pool in code neither torch.fx nor hooks see. For its duration, :func:`exporter_translations`
registers a TorchScript-exporter symbolic for ``aten::adaptive_avg_pool1d/2d/3d``, and
:func:`dynamo_translation_table` gives the dynamo exporter's ``custom_translation_table`` entries
for the same ops. Both emit one exact, portable form (:func:`_lower`): where the exporter knows the
input's spatial sizes, GlobalAveragePool, AveragePool for uniform windows, otherwise one constant
MatMul per pooled axis (averaging, reduction and nearest upsampling are all matrices). An axis of
dynamic length gets its averaging matrix built in the graph from the runtime length
(:func:`_runtime_weight`: Shape, Gather of one index, Range, Mul, Add, Div, Less/Greater, And,
Cast), so a graph exported with dynamic spatial axes is exact at every size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .planning import choose_plan
from .replacements import averaging_matrix

_OPSET = 9
_OPS = {1: "aten::adaptive_avg_pool1d", 2: "aten::adaptive_avg_pool2d", 3: "aten::adaptive_avg_pool3d"}


class _TorchScriptOps:
    """The ONNX ops :func:`_lower` needs, in the TorchScript exporter's graph builder."""

    def __init__(self, g: Any) -> None:
        self.g = g

    def global_average_pool(self, x: Any) -> Any:
        return self.g.op("GlobalAveragePool", x)

    def average_pool(self, x: Any, kernel: list[int], strides: list[int]) -> Any:
        return self.g.op("AveragePool", x, kernel_shape_i=kernel, strides_i=strides)

    def transpose(self, x: Any, perm: list[int]) -> Any:
        return self.g.op("Transpose", x, perm_i=perm)

    def matmul(self, x: Any, weight: Any) -> Any:
        return self.g.op("MatMul", x, weight)

    def constant(self, value: torch.Tensor) -> Any:
        return self.g.op("Constant", value_t=value)

    def size(self, x: Any, axis: int) -> Any:
        """The length of axis ``axis`` of ``x``, an int64 scalar."""
        return self.g.op("Gather", self.g.op("Shape", x), self.constant(torch.tensor(axis)), axis_i=0)

    def arange(self, length: Any) -> Any:
        return self.g.op("Range", self.constant(torch.tensor(0)), length, self.constant(torch.tensor(1)))

    def binary(self, name: str, a: Any, b: Any) -> Any:
        return self.g.op(name, a, b)

    def reshape(self, x: Any, shape: list[int]) -> Any:
        return self.g.op("Reshape", x, self.constant(torch.tensor(shape)))

    def cast(self, x: Any, dtype: torch.dtype) -> Any:
        return self.g.op("Cast", x, to_i=_ONNX_DTYPES[dtype])


class _OnnxScriptOps:
    """The same ops in onnxscript, for the dynamo exporter's custom translations."""

    def __init__(self) -> None:
        from onnxscript import opset18

        self.op = opset18

    def global_average_pool(self, x: Any) -> Any:
        return self.op.GlobalAveragePool(x)

    def average_pool(self, x: Any, kernel: list[int], strides: list[int]) -> Any:
        return self.op.AveragePool(x, kernel_shape=kernel, strides=strides)

    def transpose(self, x: Any, perm: list[int]) -> Any:
        return self.op.Transpose(x, perm=perm)

    def matmul(self, x: Any, weight: Any) -> Any:
        return self.op.MatMul(x, weight)

    def constant(self, value: torch.Tensor) -> Any:
        import onnx

        if value.dtype == torch.bfloat16:  # numpy has no bfloat16: float32 and a Cast, as eager casts its weight
            single: Any = self.op.Constant(value=onnx.numpy_helper.from_array(value.float().numpy()))
            return self.op.Cast(single, to=onnx.TensorProto.BFLOAT16)
        return self.op.Constant(value=onnx.numpy_helper.from_array(value.numpy()))

    def size(self, x: Any, axis: int) -> Any:
        return self.op.Gather(self.op.Shape(x), self.constant(torch.tensor(axis)), axis=0)

    def arange(self, length: Any) -> Any:
        return self.op.Range(self.constant(torch.tensor(0)), length, self.constant(torch.tensor(1)))

    def binary(self, name: str, a: Any, b: Any) -> Any:
        return getattr(self.op, name)(a, b)

    def reshape(self, x: Any, shape: list[int]) -> Any:
        return self.op.Reshape(x, self.constant(torch.tensor(shape)))

    def cast(self, x: Any, dtype: torch.dtype) -> Any:
        return self.op.Cast(x, to=_ONNX_DTYPES[dtype])


# onnx.TensorProto's element types, without importing onnx where the TorchScript exporter runs.
_ONNX_DTYPES = {torch.float32: 1, torch.int64: 7, torch.bool: 9, torch.float16: 10, torch.float64: 11,
                torch.bfloat16: 16}


def _lower(ops: Any, x: Any, sizes: Sequence[Any], requested: Any, dims: int, dtype: torch.dtype) -> Any:
    """Exact adaptive average pooling of ``x`` to ``requested`` in portable ONNX.

    ``sizes`` is ``x``'s shape as the exporter knows it, ``None`` for an axis of dynamic length.
    ``requested`` holds ints, ``None`` (the input's own length) or, where the exporter computes
    the output size in the graph (an interpolate ``scale_factor`` over a dynamic axis), that
    int64 scalar.
    """
    if not sizes or len(sizes) < dims:
        raise ValueError(
            f"fxpool: adaptive_avg_pool{dims}d needs the input's rank to export; the exporter knows its shape "
            f"only as {list(sizes)}. Convert with fxpool.convert(..., dynamic=True) before exporting.")
    requested = [requested] * dims if isinstance(requested, int) else (
        list(requested) if isinstance(requested, (list, tuple)) else [])
    if len(requested) != dims:
        raise ValueError(f"fxpool: adaptive_avg_pool{dims}d's output size is not known when exporting; pass a "
                         f"fixed output size, or keep the spatial axes static.")
    in_sizes = tuple(s if isinstance(s, int) else None for s in sizes[-dims:])
    out_sizes = tuple(i if o is None or (isinstance(o, int) and o == -1) else o for i, o in zip(in_sizes, requested))
    batched = len(sizes) == dims + 2  # ONNX pooling wants (N, C, spatial...)
    static_out = all(isinstance(o, int) for o in out_sizes)
    if static_out and all(o == 1 for o in out_sizes) and batched:
        return ops.global_average_pool(x)  # exact at any size
    if None not in in_sizes and static_out:
        plan = choose_plan("avg", in_sizes, out_sizes)  # type: ignore[arg-type]
        if (any(a.kind == "pool" for a in plan.axes) and batched
                and all(a.kind in ("pool", "identity", "reduce") for a in plan.axes)):
            return ops.average_pool(x, [a.kernel for a in plan.axes], [a.stride for a in plan.axes])
    rank = len(sizes)
    for axis, (i, o) in enumerate(zip(in_sizes, requested)):
        if o is None or (isinstance(o, int) and o in (-1, i)):  # the output is the input's length: nothing to pool
            continue
        position = rank - dims + axis
        perm = list(range(rank))
        perm[position], perm[-1] = perm[-1], perm[position]
        moved = x if position == rank - 1 else ops.transpose(x, perm)
        if isinstance(i, int) and isinstance(o, int):
            weight = ops.constant(averaging_matrix(i, o, dtype).t().contiguous())  # (in x out)
        else:
            weight = _runtime_weight(ops, x, position, o, dtype)
        pooled = ops.matmul(moved, weight)
        x = pooled if position == rank - 1 else ops.transpose(pooled, perm)
    return x


def _runtime_weight(ops: Any, x: Any, position: int, out_size: Any, dtype: torch.dtype) -> Any:
    """The (length x out) averaging matrix of axis ``position`` of ``x``, built in the graph.

    Input ``j`` is in window ``i`` exactly when ``(j + 1) * out > i * L`` and ``j * out < (i + 1) * L``
    (PyTorch's ``[floor(i*L/out), ceil((i+1)*L/out))`` without division); the window's length
    ``ceil((i+1)*L/out) - floor(i*L/out)`` is integer division of non-negative int64s, exact.
    ``out_size`` is an int or an int64 scalar of the graph.
    """
    def const(value: int) -> Any:
        return ops.constant(torch.tensor(value))

    def add(a: Any, b: Any) -> Any:
        return ops.binary("Add", a, b)

    def mul(a: Any, b: Any) -> Any:
        return ops.binary("Mul", a, b)

    def div(a: Any, b: Any) -> Any:
        return ops.binary("Div", a, b)

    length = ops.size(x, position)
    if isinstance(out_size, int):
        out, i = const(out_size), ops.constant(torch.arange(out_size))  # (out,)
    else:
        out = ops.cast(out_size, torch.int64)  # the TorchScript exporter may compute it in floats
        i = ops.arange(out)
    j = ops.reshape(ops.arange(length), [-1, 1])  # (L, 1)
    i_next = add(i, const(1))
    member = ops.binary("And", ops.binary("Greater", mul(add(j, const(1)), out), mul(i, length)),
                        ops.binary("Less", mul(j, out), mul(i_next, length)))
    end = div(add(mul(i_next, length), ops.binary("Sub", out, const(1))), out)
    start = div(mul(i, length), out)
    count = ops.cast(ops.binary("Sub", end, start), dtype)
    return div(ops.cast(member, dtype), count)


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

    A ``None`` in ``output_size`` reaches the exporter as ``x.size(axis)``, which a dynamic axis
    leaves as Shape and Gather; other entries not constant stay graph values.
    """
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
        follows = (gather.kind() == "onnx::Gather" and len(inputs) == 2 and inputs[0].node().kind() == "onnx::Shape"
                   and next(inputs[0].node().inputs()).unique() == x.unique()
                   and symbolic_helper._maybe_get_const(inputs[1], "i") == position)
        entries.append(None if follows else entry)  # else computed in the graph: an int64 scalar
    return entries


def _torchscript_dtype(x: Any) -> torch.dtype:
    try:
        name = x.type().scalarType()
    except RuntimeError:  # no tensor type recorded
        name = None
    return {"Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16}.get(name, torch.float32)


def _translation(dims: int) -> Callable[..., Any]:
    def translation(x: Any, output_size: Sequence[int]) -> Any:
        sizes = [d if isinstance(d, int) else None for d in x.shape] if x.shape is not None else []
        return _lower(_OnnxScriptOps(), x, sizes, list(output_size), dims, _onnxscript_dtype(x))
    return translation


def _onnxscript_dtype(x: Any) -> torch.dtype:
    names = {"DOUBLE": torch.float64, "FLOAT16": torch.float16, "BFLOAT16": torch.bfloat16}
    return names.get(getattr(x.dtype, "name", ""), torch.float32)


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
    """Register fxpool's TorchScript-exporter symbolics for adaptive average pooling, then remove them.

    Re-entrant: only the outermost block registers and unregisters.
    """
    global _active
    registered = []
    try:
        if _active == 0:
            for dims, name in _OPS.items():
                torch.onnx.register_custom_op_symbolic(name, _symbolic(dims), _OPSET)
                registered.append(name)
        _active += 1
        try:
            yield
        finally:
            _active -= 1
    finally:
        for name in registered:
            torch.onnx.unregister_custom_op_symbolic(name, _OPSET)
