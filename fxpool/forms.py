"""The plain ops each step of a plan runs (:func:`run_steps`, :func:`run_onnx_steps`) and the constant tables they
gather by, built exactly from the window bounds. None multiplies an entry outside its window, so NaN and ±inf stay in
their windows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .sizechecks import exporting_for_torch_runtimes, in_onnx_export
from .steps import (
    WINDOW_MAXIMA_MAX_GATHERS,
    BlockReduceStep,
    PoolPlan,
    PoolStep,
    ReduceStep,
    SlidingWindowStep,
    SpatialLayoutStep,
    UpsampleStep,
    WindowCountStep,
    WindowGatherStep,
    WindowReduceStep,
    WindowScaleStep,
    WindowSlicesStep,
    WindowZeroStep,
)
from .windows import window_bounds

LOW_PRECISION = (torch.float16, torch.bfloat16)
AVG_POOLS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
MAX_POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def keep_memory_format(source: torch.Tensor, result: torch.Tensor, spatial_dims: int) -> torch.Tensor:
    """``result`` in the layout PyTorch's adaptive pools give for ``source`` (2d keeps channels-last, 3d is contiguous)."""
    if not isinstance(source, torch.Tensor):  # a Proxy under torch.fx
        return result
    if spatial_dims == 3:
        return result.contiguous()
    channels_last = torch.channels_last
    if spatial_dims == 2 and source.dim() == 4 and not source.is_contiguous() and source.is_contiguous(memory_format=channels_last):
        return result.contiguous(memory_format=channels_last)
    return result


def sliding_window_indices(in_size: int, out_size: int, lengths: Sequence[int]) -> torch.Tensor:
    """Where each window's mean lies in the concatenated stride-1 AvgPools of ``lengths`` (one block of
    ``in_size - length + 1`` entries per length, shortest first): its length's block, then its start."""
    offsets, offset = {}, 0
    for length in lengths:
        offsets[length] = offset
        offset += in_size - length + 1
    return torch.tensor([offsets[end - start] + start for start, end in window_bounds(in_size, out_size)], dtype=torch.int64)


def window_gather_indices(in_size: int, out_size: int, span: int, zero_padded: bool = False) -> torch.Tensor:
    """Each window's positions in order, padded to ``span``: by repeating its last position (max: a repeat
    comes after what it copies, so the first maximum, and its gradient, stay where PyTorch's are), or by
    ``in_size`` (``zero_padded``, average: the zero appended to the axis)."""
    positions = []
    for start, end in window_bounds(in_size, out_size):
        positions += list(range(start, end)) + [in_size if zero_padded else end - 1] * (span - (end - start))
    return torch.tensor(positions, dtype=torch.int64)


def window_position_indices(in_size: int, out_size: int, span: int) -> list[torch.Tensor]:
    """``span`` index vectors: vector ``j`` holds position ``j`` of every window (a shorter window repeating its last),
    so the elementwise maximum of the gathered vectors is each window's maximum."""
    bounds = window_bounds(in_size, out_size)
    return [torch.tensor([min(start + j, end - 1) for start, end in bounds], dtype=torch.int64) for j in range(span)]


def window_maxima(x: torch.Tensor, dim: int, gathers: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each window's maximum along ``dim``: the elementwise maximum of ``x`` gathered at each index vector
    of :func:`window_position_indices`, NaN where the window holds one (:func:`nan_flagged`)."""
    result = torch.index_select(x, dim, gathers[0])
    magnitudes = result.abs()
    for indices in gathers[1:]:
        entries = torch.index_select(x, dim, indices)
        result = torch.maximum(result, entries)
        magnitudes = magnitudes + entries.abs()
    return nan_flagged(result, magnitudes)


def window_block_maxima(
    x: torch.Tensor | FlaggedMaxima, dim: int, positions: torch.Tensor, out_size: int, span: int
) -> FlaggedMaxima:
    """Each window's :class:`FlaggedMaxima` along ``dim`` from one gather of its positions (long windows)."""
    return flagged_reduction(x, lambda t: t.index_select(dim, positions).unflatten(dim, (out_size, span)), dim + 1)


def window_slice_maxima(x: torch.Tensor, dim: int, bounds: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Each window sliced out, reduced and flagged (:func:`flagged_window_maxima`), concatenated along ``dim``."""
    return flagged_window_maxima([x.narrow(dim, start, end - start) for start, end in bounds], dim, keepdim=True)


def flagged_window_maxima(windows: Sequence[torch.Tensor], dim: int, keepdim: bool) -> torch.Tensor:
    """Each window's maximum over ``dim``, flagged (:meth:`FlaggedMaxima.value`) window by window, joined along
    ``dim``: concatenated where the reductions keep their axis, else stacked. Few long windows run fastest so in
    onnxruntime: flagged at once after a Concat of each reduction, or carried to the next axis (three Slices per
    window there), 64x64->6x6 took 1.4-1.6x as long. Which join is faster depends on the layout: in spatial-first
    planes (the static form) keeping the axis (stacking took 2-3x as long), in NCHW (``dynamic=True``'s) stacking
    (1.3x)."""
    maxima = [flagged_reduction(window, lambda t: t, dim, keepdim).value() for window in windows]
    return torch.cat(maxima, dim) if keepdim else torch.stack(maxima, dim)


@dataclass(frozen=True)
class FlaggedMaxima:
    """Windows' maxima under ONNX export with what their flag needs, carried from axis to axis and flagged once
    (:meth:`value`): each window's ReduceMax, and the sum and the minimum of its entries lifted by
    ``LeakyRelu(alpha=-0.5)`` (at least 0; -inf to +inf, the lowest float to half the highest). A later axis reduces
    each part as its own: the maximum of maxima, the sum of sums, the minimum of minima."""

    maxima: torch.Tensor
    lifted_sums: torch.Tensor
    lifted_minima: torch.Tensor

    def value(self) -> torch.Tensor:
        """The maxima, NaN where a window held NaN (the lifted sum is NaN exactly there: :func:`nan_flagged`) and
        -inf where it held -inf alone: there OpenVINO's ReduceMax gives the lowest float (it starts from it) and the
        lifted minimum is above half the highest (OpenVINO's ReduceMin gives the highest float for +inf alone), while
        a window holding the lowest float itself, a common mask value, has half the highest."""
        lowest = torch.finfo(self.maxima.dtype).min
        alone = (self.maxima == lowest) & (self.lifted_minima > -lowest / 2)
        return nan_flagged(torch.where(alone, float("-inf"), self.maxima), self.lifted_sums)


def flagged_reduction(
    entries: torch.Tensor | FlaggedMaxima, take: Callable[[torch.Tensor], torch.Tensor], dim: int, keepdim: bool = False
) -> FlaggedMaxima:
    """The windows ``take`` cuts out of ``entries``, reduced over ``dim``: entries are lifted (one LeakyRelu) and
    reduced three ways; an earlier axis's :class:`FlaggedMaxima` part by part, with no lift."""
    if isinstance(entries, FlaggedMaxima):
        maxima, sums, minima = (take(part) for part in (entries.maxima, entries.lifted_sums, entries.lifted_minima))
        return FlaggedMaxima(maxima.amax(dim, keepdim=keepdim), sums.sum(dim, keepdim=keepdim), minima.amin(dim, keepdim=keepdim))
    windows = take(entries)
    lifted = F.leaky_relu(windows, -0.5)
    return FlaggedMaxima(windows.amax(dim, keepdim=keepdim), lifted.sum(dim, keepdim=keepdim), lifted.amin(dim, keepdim=keepdim))


def nan_flagged(maxima: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    """``maxima`` with NaN where ``magnitudes`` (a window's sum of non-negative entries: NaN exactly where it holds NaN)
    is: ``-inf - magnitudes`` as Max's second operand, the one whose NaN OpenVINO's Max keeps (onnxruntime's
    ReduceMax skips NaN; IsNaN and Where ran 2.4x slower)."""
    return torch.maximum(maxima, float("-inf") - magnitudes)


def window_sums(x: torch.Tensor, dim: int, positions: torch.Tensor, out_size: int, span: int) -> torch.Tensor:
    """Each window's sum along ``dim``: its zero-padded positions (:func:`window_gather_indices`) gathered at
    once, split into windows and summed over the span (:func:`span_sum`). No Add, Mul or Where: NaN and ±inf
    stay in their windows, and static INT8 quantizers leave the Einsum in float."""
    if torch.jit.is_tracing():
        windows = x[(slice(None),) * dim + (positions.view(out_size, span),)]
    else:
        windows = x.index_select(dim, positions).unflatten(dim, (out_size, span))
    return span_sum(windows, dim + 1)


def block_reduce(x: torch.Tensor, dim: int, family: str, in_size: int, out_size: int) -> torch.Tensor:
    """Each block's sum (avg) or maximum (max) along ``dim``, where ``out_size`` blocks of one length tile
    it: a Reshape to ``(out_size, length)`` and one reduction over the length."""
    # reshape, not unflatten: the TorchScript exporter computes unflatten's shape in a dozen ops
    blocks = x.reshape(x.shape[:dim] + (out_size, in_size // out_size) + x.shape[dim + 1 :])
    return blocks.amax(dim + 1) if family == "max" else span_sum(blocks, dim + 1)


def span_sum(windows: torch.Tensor, dim: int, rank: int | None = None) -> torch.Tensor:
    """The sum over ``dim`` (of ``rank`` axes: a torch.fx Proxy has no ``dim()``): a ReduceSum under the
    TorchScript exporter, an Einsum under torch.export, which static INT8 quantizers leave in float."""
    if torch.jit.is_tracing():
        return windows.sum(dim)
    axes = "abcdefgh"[: windows.dim() if rank is None else rank]
    return torch.einsum(f"{axes}->{axes[:dim]}{axes[dim + 1 :]}", windows)


def append_zeros(x: torch.Tensor, dims: Sequence[int], rank: int | None = None) -> torch.Tensor:
    """``x`` with one zero appended to each of ``dims``: one Pad (``rank``: ``x.dim()``, which a torch.fx Proxy lacks)."""
    padded = set(dims)
    return F.pad(x, [p for d in reversed(range(x.dim() if rank is None else rank)) for p in (0, int(d in padded))])


def concat_zero(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with one zero appended along ``dim``: one Concat (where a Pad's pads would not fold)."""
    return torch.cat([x, torch.zeros_like(x.narrow(dim, 0, 1))], dim)


def window_counts(windows: Sequence[tuple[int, int] | None]) -> torch.Tensor:
    """Every output's window size: the product of its window lengths along the pooled axes (``(in, out)``)."""
    counts = torch.ones([1] * len(windows), dtype=torch.float64)
    for axis, window in enumerate(windows):
        if window is not None:
            lengths = torch.tensor([end - start for start, end in window_bounds(*window)], dtype=torch.float64)
            counts = counts * lengths.view([-1 if a == axis else 1 for a in range(len(windows))])
    return counts


def move_spatial_axes(x: torch.Tensor, dims: int, first: bool) -> torch.Tensor:
    """The ``dims`` trailing spatial axes moved in front (``first``) or back behind the others, contiguous: one Transpose."""
    rank = x.dim()
    lead = rank - dims if first else dims
    return x.permute(list(range(lead, rank)) + list(range(lead))).contiguous()


def window_scales(in_size: int, out_size: int, span: int) -> torch.Tensor:
    """``span / length`` of each window, in float64: turns an AvgPool over zero-padded windows into their means."""
    return torch.tensor([span / (end - start) for start, end in window_bounds(in_size, out_size)], dtype=torch.float64)


def avg_pool_as_2d(x: torch.Tensor, kernel: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """A 1d or 3d average pool as 2d ones: a 1d pool over planes of height 1; a 3d one over H and W of every
    (lead, D) plane, then over D (an average over a box is the average over D of the averages over H and W).
    Exports get it (:func:`averages_as_2d`): onnxruntime's AveragePool from opset 19 (the exporters write 20)
    walks 1d and 3d windows about 4x slower than opset 18's, 2d ones as fast (its 1d and 3d pools took 1.6-17x
    this form's time: ``make bench``'s ``blocks`` section), and ExecuTorch's runtime has no avg_pool3d kernel (a
    program holding one fails to load)."""
    lead = x.shape[: -len(kernel)]
    if any(isinstance(size, int) and size == 0 for size in lead):  # nothing to pool: a 2d pool refuses 0 channels
        return AVG_POOLS[len(kernel)](x, kernel, stride)
    if len(kernel) == 1:  # (N, C, 1, L): the channels stay an axis of their own, which onnxruntime's fast pools need known
        return F.avg_pool2d(x.unsqueeze(-2), (1, kernel[0]), (1, stride[0])).squeeze(-2)
    # 4d tensors throughout: runtimes lay a 2d pool's input out as NCHW (XNNPACK, LiteRT's NHWC transpose)
    depth, height, width = x.shape[-3:]
    planes = F.avg_pool2d(x.reshape(1, -1, height, width), kernel[1:], stride[1:])  # H and W, every (lead, D) plane
    out_h, out_w = planes.shape[-2:]
    columns = F.avg_pool2d(planes.reshape(1, -1, depth, out_h * out_w), (kernel[0], 1), (stride[0], 1))  # D
    return columns.reshape(*lead, columns.shape[-2], out_h, out_w)


def averages_as_2d(dims: int) -> bool:
    """Whether an average pool over ``dims`` axes runs as 2d ones (:func:`avg_pool_as_2d`): under ONNX export in
    1d and 3d, and in 3d under ``torch.export`` for PyTorch runtimes too."""
    return dims != 2 and (in_onnx_export() or (dims == 3 and torch.compiler.is_exporting()))


def _reduce(x: torch.Tensor, step: ReduceStep, dims: int) -> torch.Tensor:
    axes = [a - dims for a in step.axes]
    if step.family == "avg":
        return x.mean(dim=axes, keepdim=True)
    if in_onnx_export() or not needs_gradient(x):
        return torch.amax(x, dim=axes, keepdim=True)  # one ReduceMax; the values are the same
    # max(dim) sends the gradient to the first maximum (amax splits it among ties), last axis first as PyTorch's
    for axis in reversed(axes):
        x = torch.max(x, dim=axis, keepdim=True).values
    return x


def needs_gradient(x: torch.Tensor) -> bool:
    """Whether a gradient may flow back through ``x`` (a Proxy under torch.fx: assume so)."""
    return not isinstance(x, torch.Tensor) or (torch.is_grad_enabled() and x.requires_grad)


def _cast_like(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # Under torch.fx both are Proxies, so the cast is recorded rather than decided.
    if isinstance(x, torch.fx.Proxy) or weight.dtype != x.dtype:
        return weight.to(x.dtype)
    return weight


def sliding_window_means(x: torch.Tensor, step: SlidingWindowStep, dims: int, indices: torch.Tensor) -> torch.Tensor:
    """Each window's mean along ``step.axis``: a stride-1 AvgPool per window length (a length of 1 is the axis
    itself), concatenated, then the window starts gathered (:func:`sliding_window_indices`). 1d and 2d only."""
    dim = step.axis - dims
    blocks = []
    for length in step.lengths:
        if length == 1:
            blocks.append(x)
            continue
        kernel = [1] * dims
        kernel[step.axis] = length
        blocks.append(AVG_POOLS[dims](x, kernel, 1))
    return torch.index_select(torch.cat(blocks, dim) if len(blocks) > 1 else blocks[0], dim, indices)


def window_slice_means(x: torch.Tensor, dim: int, bounds: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Each window's mean along ``dim`` (negative): the window sliced out and averaged, the means concatenated
    (by an AvgPool2d over the window where :func:`_means_by_pool`)."""
    by_pool = _means_by_pool(x)
    means = []
    for start, end in bounds:
        window = x.narrow(dim, start, end - start)
        if by_pool:
            kernel = [1, 1]
            kernel[dim] = end - start
            means.append(F.avg_pool2d(window, kernel, kernel))
        else:
            means.append(window.mean(dim, keepdim=True))
    return torch.cat(means, dim)


def _means_by_pool(x: torch.Tensor) -> bool:
    """A 2d pool under torch.export for a PyTorch runtime: XNNPACK (ExecuTorch) takes AvgPool2d, but no mean over
    one axis, nor a gather, so each window is averaged by an AvgPool2d over it."""
    return exporting_for_torch_runtimes() and x.dim() == 4


def _upsample(x: torch.Tensor, step: UpsampleStep, batched: bool) -> torch.Tensor:
    dims = len(step.sizes)
    if isinstance(x, torch.Tensor):  # eager: follow the input; under torch.fx, the traced layout
        batched = x.dim() == dims + 2
    sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(step.sizes)]
    if batched:
        return F.interpolate(x, size=sizes, mode="nearest")
    return F.interpolate(x.unsqueeze(0), size=sizes, mode="nearest").squeeze(0)


def plan_constants(plan: PoolPlan, dtype: torch.dtype, device: torch.device | str | None) -> dict[str, torch.Tensor]:
    """The constant tables a plan's steps read, by the buffer name its replacement holds them under: window
    indices (``indices_*``), scales in ``dtype`` (``weight_*``) and window sizes (``counts_onnx_*``), built
    exactly from the window bounds, on ``device``."""
    constants: dict[str, torch.Tensor] = {}
    for index, step in enumerate(plan.steps):
        if isinstance(step, WindowGatherStep):
            constants[f"indices_{index}"] = window_gather_indices(step.in_size, step.out_size, step.span, step.zero_padded)
        elif isinstance(step, SlidingWindowStep):
            constants[f"indices_{index}"] = sliding_window_indices(step.in_size, step.out_size, step.lengths)
        elif isinstance(step, WindowScaleStep):
            constants[f"weight_{index}"] = window_scales(step.in_size, step.out_size, step.span).to(dtype)
    for index, step in enumerate(plan.onnx_steps):
        if isinstance(step, WindowReduceStep) and step.family == "max" and step.span > WINDOW_MAXIMA_MAX_GATHERS:
            constants[f"indices_onnx_{index}"] = window_gather_indices(step.in_size, step.out_size, step.span)
        elif isinstance(step, WindowReduceStep) and step.family == "max":
            for j, indices in enumerate(window_position_indices(step.in_size, step.out_size, step.span)):
                constants[f"indices_onnx_{index}_{j}"] = indices
        elif isinstance(step, WindowReduceStep):
            constants[f"indices_onnx_{index}"] = window_gather_indices(step.in_size, step.out_size, step.span, zero_padded=True)
        elif isinstance(step, WindowCountStep):
            constants[f"counts_onnx_{index}"] = window_counts(step.windows)
    return {name: tensor.to(device) for name, tensor in constants.items()}


def run_steps(module: Any, x: torch.Tensor) -> torch.Tensor:
    """The plan's ``steps`` on ``x``, with ``module``'s constants (an :class:`~fxpool.replacements.ExactAdaptivePool`):
    what tracers see, and eager where no one-call form serves."""
    source = x
    if not module.plan.steps:
        return x
    dims = module.plan.spatial_dims
    # Native pools sum half/bfloat16 in float32 and round once; so do we (no branch on the dtype: torch.fx traces it)
    dtype = x.dtype
    upcast = not isinstance(dtype, torch.dtype) or dtype in LOW_PRECISION  # a Proxy under torch.fx
    if upcast:
        x = x.to(torch.promote_types(dtype, torch.float32))
    for index, step in enumerate(module.plan.steps):
        if isinstance(step, PoolStep) and step.family == "avg" and averages_as_2d(dims):
            x = avg_pool_as_2d(x, step.kernel, step.stride)
        elif isinstance(step, PoolStep):
            pool = AVG_POOLS[dims] if step.family == "avg" else MAX_POOLS[dims]
            x = pool(x, step.kernel, step.stride)
        elif isinstance(step, ReduceStep):
            x = _reduce(x, step, dims)
        elif isinstance(step, SlidingWindowStep) and not _means_by_pool(x):
            x = sliding_window_means(x, step, dims, getattr(module, f"indices_{index}"))
        elif isinstance(step, (SlidingWindowStep, WindowSlicesStep)):
            x = window_slice_means(x, step.axis - dims, window_bounds(step.in_size, step.out_size))
        elif isinstance(step, WindowGatherStep):
            if step.zero_padded:  # one zero at the end of the axis, where the padding indices point
                x = concat_zero(x, step.axis - dims)
            x = torch.index_select(x, step.axis - dims, getattr(module, f"indices_{index}"))
        elif isinstance(step, WindowScaleStep):
            scale = _cast_like(module._weight_for(index, x), x)
            x = x * scale.reshape((-1,) + (1,) * (dims - 1 - step.axis))
        elif isinstance(step, UpsampleStep):
            x = _upsample(x, step, module.batched)
        else:
            raise AssertionError(f"unknown step {step!r}")
    return keep_memory_format(source, x.to(dtype) if upcast else x, dims)


def run_onnx_steps(module: Any, x: torch.Tensor) -> torch.Tensor:
    """The plan's ``onnx_steps``, values only (ONNX graphs are for inference); window sums of float16 and
    bfloat16 inputs are taken in float32, as PyTorch's average pools accumulate them."""
    source, dims, dtype = x, module.plan.spatial_dims, x.dtype
    upcast = module.plan.family == "avg" and dtype in LOW_PRECISION
    if upcast:
        x = x.float()
    spatial_first = False
    # The TorchScript exporter computes a Pad's pads in a dozen int64 ops: there each axis gets its zero by a Concat.
    zero_by_concat: set[int] = set()
    flagged: FlaggedMaxima | None = None  # reduced maxima carried from axis to axis, flagged before any other step
    for index, step in enumerate(module.plan.onnx_steps):
        first_spatial = 0 if spatial_first else x.dim() - dims  # where the spatial axes lie now
        if isinstance(step, WindowReduceStep) and step.family == "max" and step.span > WINDOW_MAXIMA_MAX_GATHERS:
            indices = getattr(module, f"indices_onnx_{index}")
            flagged = window_block_maxima(flagged or x, first_spatial + step.axis, indices, step.out_size, step.span)
            continue
        if flagged is not None:
            x, flagged = flagged.value(), None
        if isinstance(step, WindowSlicesStep):  # the max family's few long windows, flagged axis by axis
            x = window_slice_maxima(x, first_spatial + step.axis, window_bounds(step.in_size, step.out_size))
        elif isinstance(step, WindowReduceStep) and step.family == "max":
            gathers = [getattr(module, f"indices_onnx_{index}_{j}") for j in range(step.span)]
            x = window_maxima(x, first_spatial + step.axis, gathers)
        elif isinstance(step, WindowReduceStep):
            dim = first_spatial + step.axis
            if step.axis in zero_by_concat:
                x = concat_zero(x, dim)
            x = window_sums(x, dim, getattr(module, f"indices_onnx_{index}"), step.out_size, step.span)
        elif isinstance(step, BlockReduceStep):
            x = block_reduce(x, first_spatial + step.axis, step.family, step.in_size, step.out_size)
        elif isinstance(step, WindowZeroStep) and torch.jit.is_tracing():
            zero_by_concat = set(step.axes)
        elif isinstance(step, WindowZeroStep):
            x = append_zeros(x, [first_spatial + axis for axis in step.axes])
        elif isinstance(step, WindowCountStep):
            counts = getattr(module, f"counts_onnx_{index}").to(x.dtype)
            shape = [1] * x.dim()
            shape[first_spatial : first_spatial + dims] = counts.shape
            x = x / counts.view(shape)
        elif isinstance(step, SpatialLayoutStep):
            x = move_spatial_axes(x, dims, step.spatial_first)
            spatial_first = step.spatial_first
        elif isinstance(step, UpsampleStep):
            x = _upsample(x, step, module.batched)
        else:
            raise AssertionError(f"no ONNX form for step {step!r}")
    if flagged is not None:
        x = flagged.value()
    return keep_memory_format(source, x.to(dtype) if upcast else x, dims)
