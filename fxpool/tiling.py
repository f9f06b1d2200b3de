"""The dynamo ONNX exporter's branch for average windows that tile, in ``dynamic=True`` graphs.

Where every pooled length is a multiple of its output size (``L = o*k``), PyTorch's windows are the blocks of a
Reshape to ``(o, k)``. A graph exported at symbolic sizes cannot know this before it runs, so under the dynamo ONNX
exporter :func:`average_where_tiling` asks at run time and ``torch.cond`` becomes an ONNX If: Reshapes and
reductions where the windows tile (twice the output or more), the window gathers elsewhere. onnxruntime reduces
long blocks fastest one axis at a time (:func:`summed_by_axis`), short ones all at once (:func:`averaged_at_once`),
so a second If picks between those. Max pools keep the gathers (OpenVINO rewrites a Reshape and ReduceMax into a
MaxPool, which drops NaN).

The Reshapes are written as ONNX itself (torch.onnx's symbolic op), so ``torch.export`` never reshapes a tensor by
symbolic sizes, which adds guards (``L mod o`` is 0, ``L // o`` is not 1) that named Dims refuse. Their targets and
the If's conditions are arithmetic on an ONNX Shape, made before the If: what the exporter folded inside one left
unused initializers behind, which onnxruntime warns of. Nothing else branches: the TorchScript exporter writes If
only from scripted code, and ``torch.export`` programs for PyTorch runtimes keep one graph for every size."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch

from .onnxnodes import onnx_node, onnx_shape
from .sizechecks import in_onnx_export
from .windows import reshapes_into_blocks

LONG_BLOCKS = 8  # blocks at least this long on every axis are summed one axis at a time


def average_where_tiling(
    x: torch.Tensor, out_sizes: Sequence[int | None], windows: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """The average pool of ``x``: ``windows(x)``, or under the dynamo ONNX exporter an If that reshapes where every
    pooled length is a multiple of its output size and at least twice it (an identity ran faster as gathers). At
    static sizes the choice is made here. Not where dynamo itself traces (the exporter's strict capture): it keeps
    the gathers there, untried with the If."""
    if not torch.compiler.is_exporting() or torch.compiler.is_dynamo_compiling() or not in_onnx_export():
        return windows(x)
    dims, rank = len(out_sizes), x.dim()
    pooled = [(rank - dims + axis, size) for axis, size in enumerate(out_sizes) if size is not None]
    lengths = [x.shape[i] for i, _ in pooled]
    static = all(isinstance(length, int) for length in lengths)
    if not pooled or (static and not all(reshapes_into_blocks(length, size) for length, (_, size) in zip(lengths, pooled))):
        return windows(x)
    shape = onnx_shape(x)
    if static:
        if min(length // size for length, (_, size) in zip(lengths, pooled)) >= LONG_BLOCKS:
            return summed_by_axis(x, *_by_axis_targets(shape, out_sizes), out_sizes=out_sizes)
        return averaged_at_once(x, _at_once_target(shape, out_sizes), out_sizes=out_sizes)
    entries = [shape[i : i + 1] for i, _ in pooled]
    tiles = _all([reshapes_into_blocks(entry, size) for entry, (_, size) in zip(entries, pooled)])
    long = _all([entry // size >= LONG_BLOCKS for entry, (_, size) in zip(entries, pooled)])

    def by_axis(y: torch.Tensor, _: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        return summed_by_axis(y, *targets, out_sizes=out_sizes)

    def at_once(y: torch.Tensor, target: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        return averaged_at_once(y, target, out_sizes=out_sizes)

    def reshaped(y: torch.Tensor, long: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        return torch.cond(long, by_axis, at_once, (y, *targets))

    targets = (_at_once_target(shape, out_sizes), *_by_axis_targets(shape, out_sizes))
    return torch.cond(tiles, reshaped, lambda y, *_: windows(y), (x, long, *targets))


def averaged_at_once(x: torch.Tensor, target: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """Each window's mean: one ONNX Reshape of ``x`` to ``(..., o, L // o, ...)`` and one ReduceMean of the blocks."""
    dims = len(out_sizes)
    sizes, blocks = list(x.shape[:-dims]), []
    for axis, out_size in enumerate(out_sizes):
        length = x.shape[axis - dims]
        sizes += [length] if out_size is None else [out_size, length // out_size]
        blocks += [] if out_size is None else [len(sizes) - 1]
    return onnx_node("Reshape", [x, target], x.dtype, sizes).mean(blocks)


def summed_by_axis(x: torch.Tensor, *targets: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """Each window's mean: per pooled axis one ONNX Reshape of the tensor so far to ``(outer * o, L // o, inner)``
    (``(outer * o, L // o)`` for the last axis) and one ReduceSum of its blocks, as the static graph sums; then a
    Reshape to the output's shape and one Div by the window size."""
    dims = len(out_sizes)
    sizes, count = list(x.shape), 1
    pooled = [(len(sizes) - dims + axis, size) for axis, size in enumerate(out_sizes) if size is not None]
    for (i, out_size), target in zip(pooled, targets):
        block = sizes[i] // out_size
        shape = [math.prod(sizes[:i]) * out_size, block] + ([math.prod(sizes[i + 1 :])] if i + 1 < len(sizes) else [])
        x = onnx_node("Reshape", [x, target], x.dtype, shape).sum(1)
        sizes[i], count = out_size, count * block
    return onnx_node("Reshape", [x, targets[-1]], x.dtype, sizes) / count


def _at_once_target(shape: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """:func:`averaged_at_once`'s Reshape target: a 0 (keep) per leading axis, ``(o, L // o)`` per pooled axis."""
    rank, dims = shape.shape[0], len(out_sizes)
    target = [shape[: rank - dims] * 0]  # constants as arithmetic on the shape: nothing to fold inside the If
    for axis, out_size in enumerate(out_sizes):
        entry = shape[rank - dims + axis : rank - dims + axis + 1]
        target += [entry] if out_size is None else [entry * 0 + out_size, entry // out_size]
    return torch.cat(target)


def _by_axis_targets(shape: torch.Tensor, out_sizes: Sequence[int | None]) -> list[torch.Tensor]:
    """:func:`summed_by_axis`'s Reshape targets: ``(-1, L // o, inner)`` per pooled axis, then the output's shape."""
    rank, dims = shape.shape[0], len(out_sizes)
    zero, targets, output = shape[:1] * 0, [], [shape[: rank - dims]]
    for axis, out_size in enumerate(out_sizes):
        i = rank - dims + axis
        if out_size is None:
            output.append(shape[i : i + 1])
            continue
        inner = [shape[i + 1 :].prod(0, keepdim=True)] if i + 1 < rank else []  # none after the last axis
        targets.append(torch.cat([zero - 1, shape[i : i + 1] // out_size, *inner]))
        output.append(zero + out_size)
    return [*targets, torch.cat(output)]


def _all(conditions: list[torch.Tensor]) -> torch.Tensor:
    """Every one of ``conditions`` (one-entry bool tensors): one And each."""
    return functools.reduce(torch.logical_and, conditions)
