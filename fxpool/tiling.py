"""The dynamo ONNX exporter's branch for average windows that tile, in ``dynamic=True`` graphs.

Where every pooled length is a multiple of its output size (``L = o*k``), PyTorch's windows are the blocks of a
Reshape to ``(o, k)``: one ReduceMean over a view. A graph exported at symbolic sizes cannot know this before it
runs, so under the dynamo ONNX exporter :func:`tiling_condition` asks at run time and ``torch.cond`` becomes an
ONNX If: :func:`reshaped_mean` where the windows tile, the window gathers elsewhere. Max pools keep the gathers
(OpenVINO rewrites a Reshape and ReduceMax into a MaxPool, which drops NaN).

The Reshape is written as ONNX itself (torch.onnx's symbolic op; its target from an ONNX Shape), so ``torch.export``
never reshapes a tensor by symbolic sizes, which adds guards (``L mod o`` is 0, ``L // o`` is not 1) that named Dims
refuse. Nothing else branches: the TorchScript exporter writes If only from scripted code, and ``torch.export``
programs for PyTorch runtimes keep one graph for every size."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import torch

from .sizechecks import in_onnx_export

# TensorProto data types of the dtypes a pool's input may have
_ONNX_DTYPES = {torch.float32: 1, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16, torch.int64: 7}


def tiling_condition(x: torch.Tensor, out_sizes: Sequence[int | None], family: str) -> Any:
    """Whether every pooled axis of ``x`` is a multiple of its output size, at least twice it (an identity ran faster
    as gathers than as a ReduceMean over axes of one entry): a SymBool where the dynamo ONNX exporter traces an
    average pool at a symbolic size, True where every such size is static; None where no branch is taken: another
    tracer, dynamo itself (it would guard on the SymBool), a static size that does not tile, or a max pool."""
    if family != "avg" or not torch.compiler.is_exporting() or torch.compiler.is_dynamo_compiling() or not in_onnx_export():
        return None
    dims, conditions = len(out_sizes), list[Any]()
    for axis, out_size in enumerate(out_sizes):
        length = x.shape[axis - dims]
        if out_size is None:
            continue
        if isinstance(length, int):
            if length % out_size or length < 2 * out_size:
                return None
        else:
            conditions.append((length % out_size == 0) & (length >= 2 * out_size))
    return functools.reduce(operator.and_, conditions) if conditions else True


def reshape_target(x: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """The target of :func:`reshaped_mean`'s Reshape, from an ONNX Shape of ``x``: a 0 (keep) per leading axis,
    ``(o, L // o)`` per pooled axis, ``L`` per other. Made outside the branch: the exporter folds what it can of it
    there, and what it folded inside an If left unused initializers behind, which onnxruntime warns of."""
    import torch.onnx.ops  # noqa: F401  (registers torch.ops.onnx_symbolic)

    dims, rank = len(out_sizes), x.dim()
    shape = _onnx_node("Shape", [x], torch.int64, [rank])
    target = [shape[: rank - dims] * 0]
    for axis, out_size in enumerate(out_sizes):
        entry = shape[rank - dims + axis : rank - dims + axis + 1]
        target += [entry] if out_size is None else [entry * 0 + out_size, entry // out_size]
    return torch.cat(target)


def reshaped_mean(x: torch.Tensor, target: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """Each window's mean where the windows tile every pooled axis: one ONNX Reshape of ``x`` to
    :func:`reshape_target` and one ReduceMean over the blocks."""
    dims = len(out_sizes)
    sizes, blocks = list(x.shape[:-dims]), []
    for axis, out_size in enumerate(out_sizes):
        length = x.shape[axis - dims]
        if out_size is None:
            sizes.append(length)
        else:
            sizes += [out_size, length // out_size]
            blocks.append(len(sizes) - 1)
    return _onnx_node("Reshape", [x, target], x.dtype, sizes).mean(blocks)


def _onnx_node(op_type: str, inputs: list[torch.Tensor], dtype: torch.dtype, shape: list[Any]) -> torch.Tensor:
    """One ONNX node without attributes, its output of ``dtype`` and ``shape`` (torch.onnx.ops.symbolic's own op,
    called directly: dynamo, which traces ``torch.cond``'s branches, does not trace that wrapper)."""
    return torch.ops.onnx_symbolic._symbolic(
        inputs,
        op_type,
        _ONNX_DTYPES[dtype],
        shape=shape,
        attr_keys=[],
        attr_types=[],
        attr_pos=[],
        attr_ints=[],
        attr_floats=[],
        attr_strs=[],
        metadata_props_keys=[],
        metadata_props_values=[],
    )
