"""The dynamo ONNX exporter's branches for windows that tile, in ``dynamic=True`` graphs.

A graph exported at symbolic sizes cannot know before it runs whether the windows will be regular, so under the
dynamo ONNX exporter :func:`pooled_where_windows_tile` asks at run time and ``torch.cond`` becomes ONNX Ifs:

- where one kernel and stride reproduce the windows of every axis, the same on each (each length at most one past a
  multiple of its output size) and the stride is at most ``NATIVE_STRIDES``: the one AveragePool or MaxPool the
  static graph has at that size (an identity: a Reshape), found by Ifs that halve the candidates. A max pool takes
  it only where its input is finite: onnxruntime's and OpenVINO's MaxPool skip NaN and give the lowest finite float
  for a window of -inf alone. A 1d or 3d average pool is 2d ones (:func:`average_pool_as_2d`).
- elsewhere, average pools whose lengths are all multiples of their output sizes reshape: long blocks are summed
  one axis at a time (:func:`reduced_by_axis`), short ones averaged at once (:func:`averaged_at_once`), as
  onnxruntime runs fastest.
- everything else gathers the windows (``windows``). A max pool's input that its ReduceL1 finds finite gets them
  reduced by ReduceMax alone, without the flag that NaN and -inf need (0.4-0.8x the time in onnxruntime), or where
  every pooled length is a multiple of its output size, blocks reduced by ReduceMax axis by axis, as the static graph
  does (max PSP 64->6 at 84x84: 0.70x the time of the slices): one more read of the input for the others.

The Ifs cost export time (dynamo traces a nested If again at every level: a lone 2d average pool took 6-9 s to
export, 3.5 s with one native arm), which bounds the native candidates; the gathers, most of what is traced, sit
once in the outermost If (a max pool's twice, flagged and not: 10-25% more export time). The pools and Reshapes are
written as ONNX itself (torch.onnx's symbolic op), so ``torch.export`` never reshapes or pools a tensor by symbolic
sizes, which adds guards (``L mod o`` is 0, ``L // o`` is not 1) that named Dims refuse. The conditions are a
handful of nodes on an ONNX Shape, made before the Ifs; inside them constants are arithmetic on that Shape, since
what the exporter folds inside an If it leaves behind as unused initializers, which onnxruntime warns of. Nothing
else branches: the TorchScript exporter writes If only from scripted code, and ``torch.export`` programs for PyTorch
runtimes keep one graph for every size."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .onnxnodes import onnx_node, onnx_shape, quotient
from .sizechecks import in_onnx_export
from .windows import reshapes_into_blocks, uniform_stride

NATIVE_STRIDES = 4  # uniform windows of strides up to this get a native pool of their own, behind Ifs
LONG_BLOCKS = 8  # blocks at least this long on every axis are summed one axis at a time

Windows = Callable[[torch.Tensor, bool], torch.Tensor]  # the gathers or slices of a tensor, told whether its entries are all finite


def pooled_where_windows_tile(x: torch.Tensor, out_sizes: Sequence[int | None], family: str, windows: Windows) -> torch.Tensor:
    """The adaptive pool of ``x``: ``windows(x)``, or under the dynamo ONNX exporter the Ifs above; at static sizes
    the arm is chosen here. Not where dynamo itself traces (the exporter's strict capture): it keeps the gathers
    there, untried with the If."""
    if not torch.compiler.is_exporting() or torch.compiler.is_dynamo_compiling() or not in_onnx_export():
        return windows(x, False)
    dims = len(out_sizes)
    pooled = [(x.dim() - dims + axis, size) for axis, size in enumerate(out_sizes) if size is not None]
    if not pooled:
        return windows(x, False)
    if all(isinstance(x.shape[i], int) for i, _ in pooled):
        return _at_static_sizes(x, out_sizes, family, windows)
    shape = onnx_shape(x)
    lengths = torch.cat([shape[i : i + 1] for i, _ in pooled])
    uniform, key, tiles, shortest = window_conditions(lengths, torch.tensor([size for _, size in pooled]))
    if x.dim() != dims + 2:  # ONNX's pools take (N, C, ...) only
        uniform = uniform & False
    output = _output_shape(shape, out_sizes)

    def natively(y: torch.Tensor, key: torch.Tensor, output: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        return _native_arms(y, key, output, out_sizes, family, NATIVE_ARMS)

    def gathered(y: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        return windows(y, False)

    # The gathers once, in the outermost If's else branch: the other arms nest inside its then branch (a max pool's
    # unflagged gathers too, traced a second time). A max pool asks whether its input is finite first (but at the
    # identity, code 2: stride and kernel 1, which reads no entry); finite entries take the native arm or windows
    # reduced without the flag, the others the flagged windows.
    if family == "max":
        identity = uniform & (key == 2)
        finite = torch.cond(identity, lambda y, identity: identity.clone(), _finite, (x, identity))

        def unflagged(
            y: torch.Tensor,
            key: torch.Tensor,
            output: torch.Tensor,
            shape: torch.Tensor,
            tiles: torch.Tensor,
            uniform: torch.Tensor,
        ) -> torch.Tensor:
            return torch.cond(uniform, natively, not_native, (y, key, output, shape, tiles))

        def not_native(
            y: torch.Tensor, _: torch.Tensor, output: torch.Tensor, shape: torch.Tensor, tiles: torch.Tensor
        ) -> torch.Tensor:
            return torch.cond(tiles, in_blocks, lambda z, *_: windows(z, True), (y, shape, output))

        def in_blocks(y: torch.Tensor, shape: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
            return reduced_by_axis(y, shape, output, out_sizes, "max")

        return torch.cond(finite, unflagged, gathered, (x, key, output, shape, tiles, uniform))

    def regular(
        y: torch.Tensor, key: torch.Tensor, output: torch.Tensor, shape: torch.Tensor, long: torch.Tensor, uniform: torch.Tensor
    ) -> torch.Tensor:
        return torch.cond(uniform, natively, reshaped, (y, key, output, shape, long))

    def reshaped(y: torch.Tensor, _: torch.Tensor, output: torch.Tensor, shape: torch.Tensor, long: torch.Tensor) -> torch.Tensor:
        return torch.cond(long, by_axis, at_once, (y, shape, output))

    def by_axis(y: torch.Tensor, shape: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return reduced_by_axis(y, shape, output, out_sizes)

    def at_once(y: torch.Tensor, shape: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
        return averaged_at_once(y, _at_once_target(shape, out_sizes), out_sizes=out_sizes)

    return torch.cond(uniform | tiles, regular, gathered, (x, key, output, shape, shortest >= LONG_BLOCKS, uniform))


def _at_static_sizes(x: torch.Tensor, out_sizes: Sequence[int | None], family: str, windows: Windows) -> torch.Tensor:
    """The arm :func:`pooled_where_windows_tile` takes at ``x``'s static size, without an If (but a max pool's look
    at its entries)."""
    dims = len(out_sizes)
    axes = [(x.shape[x.dim() - dims + axis], size) for axis, size in enumerate(out_sizes) if size is not None]
    pools = {uniform_stride(length, size) for length, size in axes}
    pool = next(iter(pools)) if len(pools) == 1 and x.dim() == dims + 2 else None  # (kernel, stride) of a native pool
    if pool is not None and (family == "avg" or pool == (1, 1)):
        kernel, stride = pool
        return native_pool(x, out_sizes, family, stride, kernel - stride)
    blocks = all(reshapes_into_blocks(length, size) for length, size in axes)
    if family == "max":

        def finite_arm(y: torch.Tensor) -> torch.Tensor:
            if pool is not None:
                kernel, stride = pool
                return native_pool(y, out_sizes, family, stride, kernel - stride)
            if blocks:
                shape = onnx_shape(y)
                return reduced_by_axis(y, shape, _output_shape(shape, out_sizes), out_sizes, "max")
            return windows(y, True)

        return torch.cond(_finite(x), finite_arm, lambda y: windows(y, False), (x,))
    if not blocks:
        return windows(x, False)
    shape = onnx_shape(x)
    if min(length // size for length, size in axes) >= LONG_BLOCKS:
        return reduced_by_axis(x, shape, _output_shape(shape, out_sizes), out_sizes)
    return averaged_at_once(x, _at_once_target(shape, out_sizes), out_sizes=out_sizes)


def window_conditions(lengths: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Of the pooled lengths and their output sizes (int64 vectors, the lengths from an ONNX Shape): whether one
    kernel and stride reproduce the windows of every axis, the same on each, with a stride of at most
    ``NATIVE_STRIDES`` (a native arm's); that arm's code (``2 * stride + kernel - stride``); whether every window is
    a block of two or more entries (:func:`~fxpool.windows.reshapes_into_blocks` on every axis); the shortest
    stride. A handful of ONNX nodes whatever the number of axes."""
    strides = quotient(lengths, sizes)
    extras = lengths - strides * sizes  # a kernel is one longer than its stride where its length is one past a multiple
    codes = strides * 2 + extras
    key, shortest, extra = codes.max(), strides.min(), extras.max()
    uniform = (codes.min() == key) & (extra <= 1) & (shortest >= 1) & (key <= 2 * NATIVE_STRIDES + 1)
    return uniform, key, (extra == 0) & (shortest >= 2), shortest


# (stride, kernel - stride) of each native arm, by code (2 * stride + kernel - stride): the identity first
NATIVE_ARMS = [(stride, extra) for stride in range(1, NATIVE_STRIDES + 1) for extra in (0, 1)]


def _native_arms(
    y: torch.Tensor,
    key: torch.Tensor,
    output: torch.Tensor,
    out_sizes: Sequence[int | None],
    family: str,
    arms: Sequence[tuple[int, int]],
) -> torch.Tensor:
    """The native pool of the one of ``arms`` whose code is ``key``: Ifs that halve the arms (nested one per arm,
    dynamo's trace of the branches ran out of Python's recursion)."""
    if len(arms) == 1:
        ((stride, extra),) = arms
        return native_pool(y, out_sizes, family, stride, extra, output)
    lower, upper = arms[: len(arms) // 2], arms[len(arms) // 2 :]
    return torch.cond(
        key < 2 * upper[0][0] + upper[0][1],
        lambda z, key, output: _native_arms(z, key, output, out_sizes, family, lower),
        lambda z, key, output: _native_arms(z, key, output, out_sizes, family, upper),
        (y, key, output),
    )


def native_pool(
    x: torch.Tensor, out_sizes: Sequence[int | None], family: str, stride: int, extra: int, output: torch.Tensor | None = None
) -> torch.Tensor:
    """One ONNX AveragePool or MaxPool of kernel ``stride + extra`` at ``stride`` on every pooled axis, the node the
    static graph has at such sizes; where both are 1, a Reshape to ``output`` (the output's runtime shape), or at
    static sizes ``x`` itself (an Identity declaring the output's shape made the exporter's optimizer take the input
    for that size)."""
    shape = [*x.shape[:2], *(x.shape[2 + axis] if size is None else size for axis, size in enumerate(out_sizes))]
    if stride == 1 and extra == 0:
        return x if output is None else onnx_node("Reshape", [x, output], x.dtype, shape)
    if family == "avg" and len(out_sizes) != 2:
        return average_pool_as_2d(x, out_sizes, stride, extra, output)
    window = {
        "kernel_shape": [1 if size is None else stride + extra for size in out_sizes],
        "strides": [1 if size is None else stride for size in out_sizes],
    }
    return onnx_node("AveragePool" if family == "avg" else "MaxPool", [x], x.dtype, shape, **window)


def average_pool_as_2d(
    x: torch.Tensor, out_sizes: Sequence[int | None], stride: int, extra: int, output: torch.Tensor | None
) -> torch.Tensor:
    """:func:`native_pool`'s average in 1d or 3d as 2d AveragePools (:func:`~fxpool.forms.avg_pool_as_2d` at
    runtime sizes): a 1d pool over planes of height 1; a 3d one over H and W of every depth's plane, then over D. The
    channels stay an axis of their own where they can: onnxruntime's fast pools need their number known, which a
    Reshape to a runtime target hides unless its declared shape names it."""
    shape, (n, c, *spatial) = onnx_shape(x), x.shape
    one = shape[:1] * 0 + 1  # constants as arithmetic on the shape, slices with ends: nothing to fold inside the If
    output = _output_shape(shape, out_sizes) if output is None else output
    sizes = [length if size is None else size for length, size in zip(spatial, out_sizes)]
    windows = [(1, 1) if size is None else (stride + extra, stride) for size in out_sizes]
    if len(out_sizes) == 1:
        planes = onnx_node("Reshape", [x, torch.cat([shape[:2], one, shape[2:3]])], x.dtype, [n, c, 1, spatial[0]])
        pooled = onnx_node(
            "AveragePool", [planes], x.dtype, [n, c, 1, sizes[0]], kernel_shape=[1, windows[0][0]], strides=[1, windows[0][1]]
        )
        return onnx_node("Reshape", [pooled, output], x.dtype, [n, c, *sizes])
    (kd, sd), (kh, sh), (kw, sw) = windows
    depth, height, width = spatial
    if extra == 0:  # windows that tile H never cross a depth: (N, C, D * H, W), the channels an axis of their own
        target, planes_shape = torch.cat([shape[:2], shape[2:4].prod(0, keepdim=True), shape[4:5]]), [n, c, depth * height, width]
        pooled_shape = [n, c, depth * sizes[1], sizes[2]]
    else:  # every depth's plane: (1, N * C * D, H, W)
        target, planes_shape = torch.cat([one, shape[:3].prod(0, keepdim=True), shape[3:5]]), [1, n * c * depth, height, width]
        pooled_shape = [1, n * c * depth, *sizes[1:]]
    planes = onnx_node("Reshape", [x, target], x.dtype, planes_shape)
    pooled = onnx_node("AveragePool", [planes], x.dtype, pooled_shape, kernel_shape=[kh, kw], strides=[sh, sw])
    columns_target = torch.cat([shape[:2], shape[2:3], output[3:5].prod(0, keepdim=True)])
    columns = onnx_node("Reshape", [pooled, columns_target], x.dtype, [n, c, depth, sizes[1] * sizes[2]])
    pooled = onnx_node(
        "AveragePool", [columns], x.dtype, [n, c, sizes[0], sizes[1] * sizes[2]], kernel_shape=[kd, 1], strides=[sd, 1]
    )
    return onnx_node("Reshape", [pooled, output], x.dtype, [n, c, *sizes])


def _finite(x: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
    """Whether every entry of ``x`` is finite (its ReduceL1 is), where a max pool may take the native arm:
    onnxruntime's and OpenVINO's MaxPool skip NaN and give the lowest finite float for a window of -inf alone
    (onnxruntime 1.32's 1d, 3d and most 2d kernels), the gathers keep both."""
    magnitude = onnx_node("ReduceL1", [x if x.dtype == torch.float32 else x.float()], torch.float32, [1] * x.dim())
    return magnitude.isfinite().reshape(())


def averaged_at_once(x: torch.Tensor, target: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """Each window's mean: one ONNX Reshape of ``x`` to ``(..., o, L // o, ...)`` and one ReduceMean of the blocks."""
    dims = len(out_sizes)
    sizes, blocks = list(x.shape[:-dims]), []
    for axis, out_size in enumerate(out_sizes):
        length = x.shape[axis - dims]
        sizes += [length] if out_size is None else [out_size, length // out_size]
        blocks += [] if out_size is None else [len(sizes) - 1]
    return onnx_node("Reshape", [x, target], x.dtype, sizes).mean(blocks)


def reduced_by_axis(
    x: torch.Tensor, shape: torch.Tensor, output: torch.Tensor, out_sizes: Sequence[int | None], family: str = "avg"
) -> torch.Tensor:
    """Each window's mean (or maximum, for finite entries: onnxruntime's ReduceMax skips NaN) where every pooled length
    is a multiple of its output size (``shape``: ``x``'s runtime shape; ``output``: the output's): per pooled axis one
    ONNX Reshape of the tensor so far to ``(outer * o, L // o, inner)`` (``(outer * o, L // o)`` for the last axis)
    and one ReduceSum (ReduceMax) of its blocks, as the static graph reduces; then a Reshape to the output's shape and
    for a mean one Div by the window size."""
    targets = _by_axis_targets(shape, out_sizes)
    dims = len(out_sizes)
    sizes, count = list(x.shape), 1
    pooled = [(len(sizes) - dims + axis, size) for axis, size in enumerate(out_sizes) if size is not None]
    for (i, out_size), target in zip(pooled, targets):
        block = sizes[i] // out_size
        split = [math.prod(sizes[:i]) * out_size, block] + ([math.prod(sizes[i + 1 :])] if i + 1 < len(sizes) else [])
        blocks = onnx_node("Reshape", [x, target], x.dtype, split)
        if family == "max":  # ONNX's own: dynamo traces the branch at sizes it never takes, where amax of 0 entries fails
            x = onnx_node("ReduceMax", [blocks, target[:1] * 0 + 1], x.dtype, [split[0], 1, *split[2:]])
        else:
            x = blocks.sum(1)
        sizes[i], count = out_size, count * block
    x = onnx_node("Reshape", [x, output], x.dtype, sizes)
    return x if family == "max" else x / count


def _at_once_target(shape: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """:func:`averaged_at_once`'s Reshape target: a 0 (keep) per leading axis, ``(o, L // o)`` per pooled axis."""
    rank, dims = shape.shape[0], len(out_sizes)
    target = [shape[: rank - dims] * 0]  # constants as arithmetic on the shape: nothing to fold inside the If
    for axis, out_size in enumerate(out_sizes):
        entry = shape[rank - dims + axis : rank - dims + axis + 1]
        target += [entry] if out_size is None else [entry * 0 + out_size, quotient(entry, out_size)]
    return torch.cat(target)


def _by_axis_targets(shape: torch.Tensor, out_sizes: Sequence[int | None]) -> list[torch.Tensor]:
    """:func:`reduced_by_axis`'s Reshape targets: ``(-1, L // o, inner)`` per pooled axis."""
    rank, dims = shape.shape[0], len(out_sizes)
    minus_one, targets = shape[:1] * 0 - 1, []  # constants as arithmetic on the shape: nothing to fold inside the If
    for axis, out_size in enumerate(out_sizes):
        i = rank - dims + axis
        if out_size is not None:
            inner = [shape[i + 1 :].prod(0, keepdim=True)] if i + 1 < rank else []  # none after the last axis
            targets.append(torch.cat([minus_one, quotient(shape[i : i + 1], out_size), *inner]))
    return targets


def _output_shape(shape: torch.Tensor, out_sizes: Sequence[int | None]) -> torch.Tensor:
    """The pool's output shape: the input's leading axes and unpooled axes, the output sizes elsewhere."""
    rank, dims = shape.shape[0], len(out_sizes)
    output = [shape[: rank - dims]]
    for axis, out_size in enumerate(out_sizes):
        entry = shape[rank - dims + axis : rank - dims + axis + 1]
        output.append(entry if out_size is None else entry * 0 + out_size)
    return torch.cat(output)
