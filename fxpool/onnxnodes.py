"""ONNX nodes written directly into what the dynamo ONNX exporter traces, where PyTorch ops would make
``torch.export`` guard on symbolic sizes (a Reshape to ``L // o``, a Slice to runtime bounds): guards that named
Dims refuse and that ONNX drops; and where the exporter's lowering would be inexact (it divides int64 tensors in
float32). Each node is torch.onnx's symbolic op, its output declared by dtype and shape."""

from __future__ import annotations

from typing import Any

import torch

from .sizechecks import in_onnx_export

# TensorProto data types of the dtypes a pool's input and its shapes may have
_ONNX_DTYPES = {torch.float32: 1, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16, torch.int64: 7}


def onnx_node(op_type: str, inputs: list[torch.Tensor], dtype: torch.dtype, shape: list[Any], **ints: list[int]) -> torch.Tensor:
    """One ONNX node, its output of ``dtype`` and ``shape``, its attributes lists of ints (``kernel_shape``,
    ``strides``): torch.onnx.ops.symbolic's own op, called directly (dynamo, which traces ``torch.cond``'s branches,
    does not trace that wrapper)."""
    from torch.onnx import ops  # noqa: F401  (registers torch.ops.onnx_symbolic)

    positions: list[tuple[int, int]] = []
    flat: list[int] = []
    for values in ints.values():
        positions.append((len(flat), len(flat) + len(values)))
        flat += values
    return torch.ops.onnx_symbolic._symbolic(
        inputs,
        op_type,
        _ONNX_DTYPES[dtype],
        shape=shape,
        attr_keys=list(ints),
        attr_types=["is"] * len(ints),
        attr_pos=positions,
        attr_ints=flat,
        attr_floats=[],
        attr_strs=[],
        metadata_props_keys=[],
        metadata_props_values=[],
    )


def onnx_shape(x: torch.Tensor) -> torch.Tensor:
    """``x``'s shape as an int64 tensor: one ONNX Shape, the source of every runtime size computed from it."""
    return onnx_node("Shape", [x], torch.int64, [x.dim()])


def quotient(numerator: torch.Tensor, divisor: torch.Tensor | int) -> torch.Tensor:
    """``numerator // divisor`` of non-negative int64 tensors, exact at every size. Under the dynamo ONNX exporter one
    ONNX Div of integers: the exporter lowers ``torch.div(..., rounding_mode="trunc")`` of int64 tensors through
    float32 (Cast, Div, Abs, Floor, Sign, Mul, Cast), which misplaced window bounds ``i * L / o`` past 2**24
    (1,000,000 -> 997: 22 starts and 36 ends). Elsewhere ``torch.div``, exact (the TorchScript exporter divides
    integers as integers)."""
    if not (torch.compiler.is_exporting() and in_onnx_export()):
        return torch.div(numerator, divisor, rounding_mode="trunc")
    if isinstance(divisor, int):
        divisor = onnx_node("Constant", [], torch.int64, [1], value_ints=[divisor])
    shape = torch.broadcast_shapes(numerator.shape, divisor.shape)
    return onnx_node("Div", [numerator, divisor], torch.int64, list(shape))


def window_slices(x: torch.Tensor, dim: int, starts: torch.Tensor, ends: torch.Tensor) -> list[torch.Tensor]:
    """Every window of ``x`` along ``dim``, ``[starts[i], ends[i])`` (int64 vectors computed from the runtime size,
    :func:`~fxpool.dynamic.runtime_window_bounds`): one ONNX Slice each, its declared length PyTorch's window
    length in exact SymInt arithmetic (no guard)."""
    length, out_size = x.shape[dim], starts.shape[0]
    axis = starts[:1] * 0 + dim  # constants as arithmetic: nothing folds inside an If
    windows = []
    for i in range(out_size):
        size = (length * (i + 1) + out_size - 1) // out_size - (length * i) // out_size
        bounds = [starts[i : i + 1], ends[i : i + 1], axis]
        windows.append(onnx_node("Slice", [x, *bounds], x.dtype, [*x.shape[:dim], size, *x.shape[dim + 1 :]]))
    return windows
