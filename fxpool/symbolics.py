"""Exporter-level translations of adaptive average pooling, for pools no graph pass can reach.

Some models take another code path under export (``if torch.onnx.is_in_onnx_export(): ...``) or
pool in code neither torch.fx nor hooks see. For its duration, :func:`exporter_translations`
registers a TorchScript-exporter symbolic for ``aten::adaptive_avg_pool1d/2d/3d``, and
:func:`dynamo_translation_table` gives the dynamo exporter's ``custom_translation_table`` entries
for the same ops. Both read the static input size the exporter knows and emit one exact, portable
form (:func:`_lower`): GlobalAveragePool, AveragePool for uniform windows, otherwise one constant
MatMul per pooled axis (averaging, reduction and nearest upsampling are all matrices).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

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

    def matmul(self, x: Any, weight: torch.Tensor) -> Any:
        return self.g.op("MatMul", x, self.g.op("Constant", value_t=weight))

    def transpose(self, x: Any, perm: list[int]) -> Any:
        return self.g.op("Transpose", x, perm_i=perm)


class _OnnxScriptOps:
    """The same ops in onnxscript, for the dynamo exporter's custom translations."""

    def __init__(self) -> None:
        from onnxscript import opset18

        self.op = opset18

    def global_average_pool(self, x: Any) -> Any:
        return self.op.GlobalAveragePool(x)

    def average_pool(self, x: Any, kernel: list[int], strides: list[int]) -> Any:
        return self.op.AveragePool(x, kernel_shape=kernel, strides=strides)

    def matmul(self, x: Any, weight: torch.Tensor) -> Any:
        import onnx

        return self.op.MatMul(x, self.op.Constant(value=onnx.numpy_helper.from_array(weight.numpy())))

    def transpose(self, x: Any, perm: list[int]) -> Any:
        return self.op.Transpose(x, perm=perm)


def _lower(ops: Any, x: Any, sizes: Sequence[Any], requested: Any, dims: int, dtype: torch.dtype) -> Any:
    """Exact adaptive average pooling of ``x`` (static ``sizes``) to ``requested`` in portable ONNX."""
    if not sizes or len(sizes) < dims or any(not isinstance(s, int) for s in sizes[-dims:]):
        raise ValueError(
            f"fxpool: adaptive_avg_pool{dims}d needs static spatial sizes to export exactly; got {list(sizes)}. "
            f"Export with static spatial axes, or convert with fxpool.convert(..., dynamic=True) first.")
    requested = [requested] * dims if isinstance(requested, int) else list(requested)
    in_sizes = tuple(int(s) for s in sizes[-dims:])
    out_sizes = tuple(i if o is None or o == -1 else int(o) for i, o in zip(in_sizes, requested))
    plan = choose_plan("avg", in_sizes, out_sizes)
    batched = len(sizes) == dims + 2  # ONNX pooling wants (N, C, spatial...)
    if all(o == 1 for o in out_sizes) and batched:
        return ops.global_average_pool(x)
    if (any(a.kind == "pool" for a in plan.axes) and batched
            and all(a.kind in ("pool", "identity", "reduce") for a in plan.axes)):
        return ops.average_pool(x, [a.kernel for a in plan.axes], [a.stride for a in plan.axes])
    rank = len(sizes)
    for axis, (i, o) in enumerate(zip(in_sizes, out_sizes)):
        if i == o:
            continue
        weight = averaging_matrix(i, o, dtype).t().contiguous()  # (in x out): multiplies from the right
        position = rank - dims + axis
        if position == rank - 1:
            x = ops.matmul(x, weight)
        else:
            perm = list(range(rank))
            perm[position], perm[-1] = perm[-1], perm[position]
            x = ops.transpose(ops.matmul(ops.transpose(x, perm), weight), perm)
    return x


def _symbolic(dims: int) -> Callable[[Any, Any, Any], Any]:
    def symbolic(g: Any, x: Any, output_size: Any) -> Any:
        from torch.onnx import symbolic_helper

        sizes = symbolic_helper._get_tensor_sizes(x) or []
        requested = symbolic_helper._maybe_get_const(output_size, "is")
        try:
            return _lower(_TorchScriptOps(g), x, sizes, requested, dims, _torchscript_dtype(x))
        except ValueError as error:
            raise torch.onnx.errors.SymbolicValueError(str(error), x) from error
    return symbolic


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
