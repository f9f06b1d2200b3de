"""Exporter-level translations of adaptive average pooling, for pools no graph pass can reach.

Some models take another code path under export (``if torch.onnx.is_in_onnx_export(): ...``) or
pool in code neither torch.fx nor hooks see. :func:`exporter_translations` registers, for its
duration, a TorchScript-exporter symbolic for ``aten::adaptive_avg_pool1d/2d/3d`` that reads the
static input size the exporter knows and emits the exact portable form: GlobalAveragePool,
AveragePool for uniform windows, otherwise one constant MatMul per pooled axis (averaging,
reduction and nearest upsampling are all matrices). It unregisters them on exit.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from .planning import choose_plan
from .replacements import averaging_matrix

_OPSET = 9
_OPS = {1: "aten::adaptive_avg_pool1d", 2: "aten::adaptive_avg_pool2d", 3: "aten::adaptive_avg_pool3d"}


def _emit(g: Any, x: Any, output_size: Any, dims: int) -> Any:
    from torch.onnx import symbolic_helper

    sizes = symbolic_helper._get_tensor_sizes(x)
    if not sizes or len(sizes) < dims or any(s is None for s in sizes[-dims:]):
        raise torch.onnx.errors.SymbolicValueError(
            f"fxpool: adaptive_avg_pool{dims}d needs static spatial sizes to export exactly; got {sizes}. "
            f"Export with static spatial axes, or convert with fxpool.convert(..., dynamic=True) first.", x)
    requested = symbolic_helper._maybe_get_const(output_size, "is")
    requested = [requested] * dims if isinstance(requested, int) else list(requested)
    in_sizes = tuple(int(s) for s in sizes[-dims:])
    out_sizes = tuple(i if o is None or o == -1 else int(o) for i, o in zip(in_sizes, requested))
    plan = choose_plan("avg", in_sizes, out_sizes)
    if all(o == 1 for o in out_sizes) and len(sizes) == dims + 2:
        return g.op("GlobalAveragePool", x)
    pooled = [a.kind == "pool" for a in plan.axes]
    if any(pooled) and all(a.kind in ("pool", "identity", "reduce") for a in plan.axes) and len(sizes) == dims + 2:
        return g.op("AveragePool", x, kernel_shape_i=[a.kernel for a in plan.axes],
                    strides_i=[a.stride for a in plan.axes])
    torch_dtype = _torch_dtype(x)
    for axis, (i, o) in enumerate(zip(in_sizes, out_sizes)):
        if i == o:
            continue
        weight = averaging_matrix(i, o, torch_dtype)
        dim = axis - dims
        if dim == -1:
            x = g.op("MatMul", x, g.op("Constant", value_t=weight.t().contiguous()))
        elif dim == -2:
            x = g.op("MatMul", g.op("Constant", value_t=weight), x)
        else:
            rank = len(sizes)
            perm = list(range(rank))
            perm[rank + dim], perm[-1] = perm[-1], perm[rank + dim]
            moved = g.op("Transpose", x, perm_i=perm)
            moved = g.op("MatMul", moved, g.op("Constant", value_t=weight.t().contiguous()))
            x = g.op("Transpose", moved, perm_i=perm)
    return x


def _torch_dtype(x: Any) -> torch.dtype:
    from torch.onnx import _type_utils

    try:
        return _type_utils.JitScalarType.from_value(x).dtype()
    except Exception:
        return torch.float32


def _symbolic(dims: int):
    def symbolic(g: Any, x: Any, output_size: Any) -> Any:
        return _emit(g, x, output_size, dims)
    return symbolic


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
