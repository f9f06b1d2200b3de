"""The modules that stand in for adaptive pools: exact, shape-specialised, export-friendly.

:class:`ExactAdaptivePool` runs the steps of a :class:`~fxpool.steps.PoolPlan` with plain ops
(``avg_pool``/``max_pool``, ``mean``/``max``, ``narrow`` and ``cat``, constant ``index_select``, nearest
``interpolate``), none of which multiplies an entry outside its window (so NaN and ±inf stay in their
windows): exporters (``torch.onnx``, ``torch.export`` and what builds on it: ExecuTorch,
AOTInductor), ``torch.jit.trace`` and ``torch.fx`` see the steps in the plan's order. ``torch.compile``
is not an exporter: it gets PyTorch's own adaptive pool, which inductor lowers exactly and faster.
Eager runs one-step plans in one call and uneven windows of both families by PyTorch's own kernel
(``runs_native_in_eager``: exact by definition, native speed); :func:`traced_forms` makes eager run
what tracers see. Window indices and scales are non-persistent buffers: they follow ``.to(device)``,
are left out of ``state_dict`` (so the converted model loads the original's weights), and are rebuilt
exactly after a dtype change, so ``.double()`` stays exact to float64.

A replacement whose plan depends on the traced spatial size checks it on every call, in eager and
while an exporter traces, and raises :class:`~fxpool.errors.SpatialSizeError` otherwise; every
replacement refuses integer input, as the native pools do. The check is an fx leaf function, so
converted models can be traced again.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import PoolCallError, SpatialSizeError
from .planning import choose_plan
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
    axis_names,
)
from .windows import window_bounds

_LOW_PRECISION = (torch.float16, torch.bfloat16)
# Axis kinds whose windows eager leaves to PyTorch's own kernel (exact, native speed by definition).
_WINDOWED_KINDS = ("gather", "sliding", "slices")
_AVG_POOLS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_MAX_POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_NATIVE_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
_NATIVE_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


def sliding_window_indices(in_size: int, out_size: int, lengths: Sequence[int]) -> torch.Tensor:
    """Where each window's mean lies in the concatenated stride-1 AvgPools of ``lengths`` (one block of
    ``in_size - length + 1`` entries per length, shortest first): its length's block, then its start."""
    offsets, offset = {}, 0
    for length in lengths:
        offsets[length] = offset
        offset += in_size - length + 1
    return torch.tensor([offsets[end - start] + start for start, end in window_bounds(in_size, out_size)], dtype=torch.int64)


def window_gather_indices(in_size: int, out_size: int, span: int, zero_padded: bool = False) -> torch.Tensor:
    """Each window's positions in order, padded to ``span``.

    By repeating its last position (max): a repeat comes after the position it copies, so a max over
    the span still finds the first (and, for NaN, the last) maximum where PyTorch does, and its
    gradient lands on the same input. Or by ``in_size`` (``zero_padded``, average): the position of
    the zero the replacement appends to the axis.
    """
    positions = []
    for start, end in window_bounds(in_size, out_size):
        positions += list(range(start, end)) + [in_size if zero_padded else end - 1] * (span - (end - start))
    return torch.tensor(positions, dtype=torch.int64)


# Prefixes of the non-persistent buffers a plan's constants live in (rebuilt exactly after any conversion)
_CONSTANT_PREFIXES = ("weight_", "indices_", "counts_")


def window_position_indices(in_size: int, out_size: int, span: int) -> list[torch.Tensor]:
    """``span`` index vectors of ``out_size`` entries: vector ``j`` holds position ``j`` of every window,
    a window shorter than ``span`` repeating its last position, so the elementwise maximum of the
    gathered vectors is each window's maximum."""
    bounds = window_bounds(in_size, out_size)
    return [torch.tensor([min(start + j, end - 1) for start, end in bounds], dtype=torch.int64) for j in range(span)]


def window_maxima(x: torch.Tensor, dim: int, gathers: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each window's maximum along ``dim``: the elementwise maximum of ``x`` gathered at each index vector
    of :func:`window_position_indices`. Exports as Gather and Max; Max propagates NaN (onnxruntime's
    MaxPool and ReduceMax skip it)."""
    result = torch.index_select(x, dim, gathers[0])
    for indices in gathers[1:]:
        result = torch.maximum(result, torch.index_select(x, dim, indices))
    return result


def window_block_maxima(x: torch.Tensor, dim: int, positions: torch.Tensor, out_size: int, span: int) -> torch.Tensor:
    """Each window's maximum along ``dim`` from one gather of its ``span`` positions (a shorter window
    repeating its last, :func:`window_gather_indices`) and one ReduceMax, with NaN where the window holds
    one: the sum of its absolute values (Abs, ReduceSum) is NaN exactly then (``|x| >= 0``: no inf - inf),
    and onnxruntime's ReduceMax skips NaN. For long windows, where a gather per position
    (:func:`window_maxima`) makes thousands of ops."""
    windows = x.index_select(dim, positions).unflatten(dim, (out_size, span))
    flags = windows.abs().sum(dim + 1)
    return torch.where(torch.isnan(flags), float("nan"), windows.amax(dim + 1))


def window_sums(x: torch.Tensor, dim: int, positions: torch.Tensor, out_size: int, span: int) -> torch.Tensor:
    """Each window's sum along ``dim``: the ``out_size * span`` window positions of
    :func:`window_gather_indices` (zero-padded) gathered at once, split into windows and summed over the
    span. No Add, Mul or Where, so NaN and ±inf stay in their windows.

    Under torch.export (the dynamo ONNX exporter, opset 18 and up): Gather, Reshape and an Einsum that
    sums the span axis, which static INT8 quantizers leave in float (NNCF quantizes the input of every
    ReduceSum, onnxruntime's QDQ every Add and Concat: one more rounding of the partial sums per axis).
    Under the TorchScript exporter (opsets from 11, before Einsum): one Gather with 2-D indices and a
    ReduceSum."""
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


def span_sum(windows: torch.Tensor, dim: int) -> torch.Tensor:
    """The sum over ``dim``: a ReduceSum under the TorchScript exporter, an Einsum under torch.export."""
    if torch.jit.is_tracing():
        return windows.sum(dim)
    axes = "abcdefgh"[: windows.dim()]
    return torch.einsum(f"{axes}->{axes[:dim]}{axes[dim + 1 :]}", windows)


def append_zeros(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """``x`` with one zero appended to each of ``dims``: one Pad."""
    padded = set(dims)
    return F.pad(x, [p for d in reversed(range(x.dim())) for p in (0, int(d in padded))])


def concat_zero(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with one zero appended along ``dim``: one Concat (where a Pad's pads would not fold)."""
    return torch.cat([x, torch.zeros_like(x.narrow(dim, 0, 1))], dim)


def window_counts(windows: Sequence[tuple[int, int] | None]) -> torch.Tensor:
    """Every output's window size, one axis per spatial axis: the product of its window lengths along the
    pooled axes (``(in_size, out_size)``), size 1 along the others."""
    counts = torch.ones([1] * len(windows), dtype=torch.float64)
    for axis, window in enumerate(windows):
        if window is not None:
            lengths = torch.tensor([end - start for start, end in window_bounds(*window)], dtype=torch.float64)
            counts = counts * lengths.view([-1 if a == axis else 1 for a in range(len(windows))])
    return counts


def move_spatial_axes(x: torch.Tensor, dims: int, first: bool) -> torch.Tensor:
    """The ``dims`` trailing spatial axes moved in front of the others (``first``), or the leading ones
    moved back behind them, contiguous: one Transpose in ONNX."""
    rank = x.dim()
    lead = rank - dims if first else dims
    return x.permute(list(range(lead, rank)) + list(range(lead))).contiguous()


def window_scales(in_size: int, out_size: int, span: int) -> torch.Tensor:
    """``span / length`` of each window, in float64: turns an AvgPool over zero-padded windows into their means."""
    return torch.tensor([span / (end - start) for start, end in window_bounds(in_size, out_size)], dtype=torch.float64)


@torch.fx.wrap
def check_input(x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
    """Return ``x`` if it is floating and its trailing spatial sizes match ``expected`` (``None``: any).

    Runs under ``torch.jit.trace`` and ``torch.export`` too, where sizes are static: a graph traced
    at another size than the conversion's would compute wrong values. A spatial size left symbolic
    by ``torch.export`` (a dynamic axis) cannot be checked and is refused.
    """
    # Eager, the common case; and torch.compile, whose guards on the sizes compared hold at run time. Not
    # torch.export's strict (dynamo) tracing: there such a guard becomes a runtime assertion ONNX drops.
    if type(x) is torch.Tensor and not torch.jit.is_tracing() and not torch.compiler.is_exporting() and x.is_floating_point():
        spatial_sizes = x.shape[-len(expected) :]
        if (
            len(spatial_sizes) == len(expected)
            and 0 not in spatial_sizes
            and all(e is None or e == s for e, s in zip(expected, spatial_sizes))
        ):
            return x
    if isinstance(x, torch.Tensor) and not x.is_floating_point():
        raise PoolCallError(
            f"{_named(location)}: input has dtype {x.dtype}; adaptive pooling needs a real floating tensor, as the "
            f"original pool does. Cast the input to a floating type."
        )
    shape = tuple(_static_size(s) for s in x.shape)
    spatial = shape[len(shape) - len(expected) :]
    if any(_known(s == 0) for s in spatial):
        raise PoolCallError(
            f"{_named(location)}: input of shape {shape} has an empty spatial axis; adaptive pooling needs non-zero "
            f"spatial sizes, as the original pool does."
        )
    if not any(e is not None for e in expected):
        return x
    seen = spatial
    traced = tuple("*" if e is None else e for e in expected)
    if any(e is not None and not (_known(s == e) or _known(s != e)) for e, s in zip(expected, seen)):
        raise SpatialSizeError(
            f"{_named(location)}: this replacement was specialised for spatial size {traced}, but it is being "
            f"exported with a dynamic spatial size ({shape}); the graph would be wrong at "
            f"other sizes. Keep spatial axes static, or convert with dynamic=True "
            f"(fxpool.convert(model, example, dynamic=True), fxpool.export(..., dynamic=True), "
            f"fxpool.onnx_export_hook(dynamic=True)) for one graph exact at every size."
        )
    if len(shape) < len(expected) or any(e is not None and not _known(s == e) for e, s in zip(expected, seen)):
        raise SpatialSizeError(
            f"{_named(location)}: this replacement was specialised for spatial size {traced} but got input of "
            f"shape {shape} (spatial {seen}). Convert again with an example input of this "
            f"size (fxpool.convert(model, example)), or convert with dynamic=True for one model "
            f"that serves every size."
        )
    return x


def _known(condition: Any) -> bool:
    """``condition`` (about sizes) holds whatever a symbolic size turns out to be, without adding a guard.

    Under ``torch.export`` a comparison of a symbolic size becomes a guard (a constraint on the dynamic
    dimension, or a runtime assertion that ONNX export drops); ``statically_known_true`` decides it from
    what is known alone, in strict (dynamo) and non-strict tracing both (dynamo even reports a SymInt as
    an int). Elsewhere sizes are ints, or torch.compile's SymInts, whose guards hold at run time.
    """
    if not torch.compiler.is_exporting():
        return bool(condition)
    # Only tracers that make symbolic sizes reach here, and they have imported it (sympy; 0.5 s otherwise).
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(condition))


def _named(location: str) -> str:
    """The pool as a user finds it: ``location`` is its module path (``features.3``, ``1``) or ``scope:node``."""
    return f"the adaptive pool at {location!r} of the converted model"


def keep_memory_format(source: torch.Tensor, result: torch.Tensor, spatial_dims: int) -> torch.Tensor:
    """``result`` in the layout PyTorch's adaptive pools give for ``source``.

    2d pools keep a channels-last input channels-last; 3d pools return a contiguous tensor whatever
    the input's layout.
    """
    if not isinstance(source, torch.Tensor):  # a Proxy under torch.fx
        return result
    if spatial_dims == 3:
        return result.contiguous()
    channels_last = torch.channels_last
    if spatial_dims == 2 and source.dim() == 4 and not source.is_contiguous() and source.is_contiguous(memory_format=channels_last):
        return result.contiguous(memory_format=channels_last)
    return result


def _static_size(size: object) -> Any:
    """A size as a Python int where one is known; torch.jit.trace hands sizes out as 0-d tensors."""
    if isinstance(size, torch.Tensor):
        with warnings.catch_warnings():  # the int only feeds this check, never the traced graph
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return int(size)
    return size


class ExactAdaptivePool(nn.Module):
    """Computes one adaptive average or max pool exactly, for the input size it was planned for."""

    def __init__(
        self,
        plan: PoolPlan,
        location: str = "adaptive pool",
        weight_dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        batched: bool = True,
    ) -> None:
        super().__init__()
        self.location = location
        self.batched = batched  # the traced input had a batch axis (eager follows the input's rank)
        self._set_plan(plan, weight_dtype, device)

    def _set_plan(self, plan: PoolPlan, dtype: torch.dtype, device: torch.device | str | None) -> None:
        self.plan = plan
        expected: list[int | None] = [None] * plan.spatial_dims
        for axis in plan.guarded_axes:
            expected[axis] = plan.in_sizes[axis]
        self.expected_sizes: tuple[int | None, ...] = tuple(expected)
        self._native_in_eager = any(a.kind in _WINDOWED_KINDS for a in plan.axes)
        for name in [name for name, _ in self.named_buffers(recurse=False) if name.startswith(_CONSTANT_PREFIXES)]:
            delattr(self, name)
        self._build_constants(dtype, device)
        # Every spatial size fixed: the eager fast path compares the input's with one tuple.
        self._fixed_sizes = self.expected_sizes if None not in self.expected_sizes else None
        self._fast = _fast_eager_kind(plan, self._native_in_eager, self._fixed_sizes is not None)

    @property
    def output_size(self) -> tuple[int | None, ...]:
        """The output size this pool computes, as ``nn.AdaptiveAvgPool2d.output_size`` holds it.

        Assigning another one (as a forward may do before each call) plans the pool again for it, at the
        same input sizes, so the replacement reads its output size where the original does.
        """
        return self.fxpool_native_reference[1]

    @output_size.setter
    def output_size(self, value: int | None | Sequence[int | None]) -> None:
        requested = normalized_output_size(value, self.plan.spatial_dims, self.location)
        if requested == self.output_size:
            return
        if self.plan.scaled_output:
            raise PoolCallError(
                f"{_named(self.location)}: its output size follows interpolate's scale_factor; it cannot be set to "
                f"{requested}. Convert the model again with the new scale."
            )
        follows = tuple(size is None for size in requested)
        out_sizes = tuple(i if size is None else size for i, size in zip(self.plan.in_sizes, requested))
        scales = [b for name, b in self.named_buffers(recurse=False) if name.startswith("weight_")]
        constants = [b for name, b in self.named_buffers(recurse=False) if name.startswith(_CONSTANT_PREFIXES)]
        dtype = scales[0].dtype if scales else torch.float32
        device = constants[0].device if constants else None
        self._set_plan(planned(self.plan.family, self.plan.in_sizes, out_sizes, follows), dtype, device)

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` gets the native pool this module stands for (same function, scriptable)."""
        return native_pool_module(*self.fxpool_native_reference)

    def _build_constants(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        """(Re)build the window scales (in ``dtype``) and window indices, exactly, on ``device``."""
        for index, step in enumerate(self.plan.steps):
            if isinstance(step, WindowGatherStep):
                indices = window_gather_indices(step.in_size, step.out_size, step.span, step.zero_padded)
                self.register_buffer(f"indices_{index}", indices.to(device), persistent=False)
            elif isinstance(step, SlidingWindowStep):
                indices = sliding_window_indices(step.in_size, step.out_size, step.lengths)
                self.register_buffer(f"indices_{index}", indices.to(device), persistent=False)
            elif isinstance(step, WindowScaleStep):
                self.register_buffer(f"weight_{index}", self._weight(step, dtype, device), persistent=False)
        for index, step in enumerate(self.plan.onnx_steps):
            if isinstance(step, WindowReduceStep) and step.family == "max" and step.span > WINDOW_MAXIMA_MAX_GATHERS:
                indices = window_gather_indices(step.in_size, step.out_size, step.span)
                self.register_buffer(f"indices_onnx_{index}", indices.to(device), persistent=False)
            elif isinstance(step, WindowReduceStep) and step.family == "max":
                for j, indices in enumerate(window_position_indices(step.in_size, step.out_size, step.span)):
                    self.register_buffer(f"indices_onnx_{index}_{j}", indices.to(device), persistent=False)
            elif isinstance(step, WindowReduceStep):
                indices = window_gather_indices(step.in_size, step.out_size, step.span, zero_padded=True)
                self.register_buffer(f"indices_onnx_{index}", indices.to(device), persistent=False)
            elif isinstance(step, WindowCountStep):
                self.register_buffer(f"counts_onnx_{index}", window_counts(step.windows).to(device), persistent=False)

    @staticmethod
    def _weight(step: WindowScaleStep, dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
        return window_scales(step.in_size, step.out_size, step.span).to(dtype=dtype, device=device)

    def _apply(self, fn, recurse: bool = True):
        # A dtype change would round the window scales, and to_empty() would leave them (and the
        # window indices) uninitialised: rebuild every constant exactly after any conversion.
        super()._apply(fn, recurse)
        constants = [b for name, b in self.named_buffers(recurse=False) if name.startswith(_CONSTANT_PREFIXES)]
        if constants:
            weights = [b for name, b in self.named_buffers(recurse=False) if name.startswith("weight_")]
            dtype = torch.float64 if weights and weights[0].dtype == torch.float64 else torch.float32
            self._build_constants(dtype, constants[0].device)
        return self

    @property
    def fxpool_native_reference(self) -> tuple[str, tuple[int | None, ...]]:
        """The family and output_size of the native pool this module stands for (for the self-check)."""
        return self.plan.family, tuple(None if a.follows_input else a.out_size for a in self.plan.axes)

    def extra_repr(self) -> str:
        names = axis_names(self.plan.spatial_dims)
        sizes = ", ".join(f"{n}={i}->{o}" for n, i, o in zip(names, self.plan.in_sizes, self.plan.out_sizes))
        return f"{self.plan.family}: {sizes}; {self.plan.describe()}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fast = self._fast
        if (
            fast
            and type(x) is torch.Tensor
            and x.dtype == torch.float32
            and x.is_contiguous()
            and x.dim() - self.plan.spatial_dims in (1, 2)
            and plain_eager()  # before reading sizes: under torch.jit.trace they are tensors
            and _fits(x.shape[-self.plan.spatial_dims :], self._fixed_sizes)
            and not torch.is_autocast_enabled(x.device.type)
        ):
            return self._run_fast(x, fast)
        x = check_input(x, self.expected_sizes, self.location)
        if torch.compiler.is_compiling() and not torch.compiler.is_exporting():
            # torch.compile is not an exporter: inductor lowers PyTorch's own pool exactly, and faster
            # than the plain-op form (compiled, 2-8x on the CPU; the H200 run: 1.4-1.6x).
            return self._native(x)
        eager = isinstance(x, torch.Tensor) and not _exporting()  # not a Proxy, nothing traces
        # Under autocast the native pool's own policy decides the output dtype (CPU runs 3d pools in
        # float32, say): in eager, PyTorch's kernel is the exact answer.
        if eager and (self.runs_native_in_eager or torch.is_autocast_enabled(x.device.type)):
            return self._native(x)
        if eager:
            return self._run(x)
        return self._traced(x)

    def _traced(self, x: torch.Tensor) -> torch.Tensor:
        """What a tracer records: the size guard, then the plan's steps (ONNX export's own where it has them)."""
        if torch.jit.is_tracing() and any(e is not None for e in self.expected_sizes):
            if torch.onnx.is_in_onnx_export():
                refuse_empty_torchscript_export(x, self.location)
                x = onnx_size_guard(x, self.expected_sizes, self.location)
            else:
                x = traced_size_check(x, self.expected_sizes, self.location)
        elif torch.jit.is_tracing() and torch.onnx.is_in_onnx_export():
            refuse_empty_torchscript_export(x, self.location)
        if isinstance(x, torch.Tensor) and x.dim() == self.plan.spatial_dims + 1:
            # Unbatched: the steps run on a batch of one. ONNX pools and the TorchScript exporter's
            # symbolics read the first two axes as batch and channels.
            return self._traced_steps(x.unsqueeze(0)).squeeze(0)
        return self._traced_steps(x)

    def _traced_steps(self, x: torch.Tensor) -> torch.Tensor:
        if self.plan.onnx_steps and torch.onnx.is_in_onnx_export():
            return self._run_onnx_steps(x)
        return self._run(x)

    def _native(self, x: torch.Tensor) -> torch.Tensor:
        """PyTorch's own adaptive pool this module stands for."""
        family, out_sizes = self.fxpool_native_reference
        dims = self.plan.spatial_dims
        sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(out_sizes)]
        native: Any = (_NATIVE_AVG if family == "avg" else _NATIVE_MAX)[dims]
        return native(x, sizes)

    def _run_fast(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        """The one-call eager form of a one-step plan (see :func:`_fast_eager_kind`)."""
        plan, dims = self.plan, self.plan.spatial_dims
        step = plan.steps[0]
        if kind == "native":
            native: Any = (_NATIVE_AVG if plan.family == "avg" else _NATIVE_MAX)[dims]
            return native(x, list(plan.out_sizes))
        if kind == "mean":
            return x.mean([a - dims for a in step.axes], keepdim=True)  # type: ignore[union-attr]
        assert kind == "pool" and isinstance(step, PoolStep)
        return (_AVG_POOLS if step.family == "avg" else _MAX_POOLS)[dims](x, step.kernel, step.stride)

    def traced_form(self, x: torch.Tensor) -> torch.Tensor:
        """What exporters, ``torch.jit.trace``, ``torch.compile`` and ``torch.fx`` see, run in eager.

        The self-check runs it beside ``forward`` where the two differ, so the form that is exported
        is proven on the example too.
        """
        x = check_input(x, self.expected_sizes, self.location)
        if x.dim() == self.plan.spatial_dims + 1:
            return self._run(x.unsqueeze(0)).squeeze(0)
        return self._run(x)

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        source = x
        if not self.plan.steps:
            return x
        dims = self.plan.spatial_dims
        # Native adaptive pools accumulate half/bfloat16 in float32 and round once; so do we.
        # (Written without Python branches on the dtype, so torch.fx can trace through it.)
        dtype = x.dtype
        upcast = not isinstance(dtype, torch.dtype) or dtype in _LOW_PRECISION  # a Proxy under torch.fx
        if upcast:
            x = x.to(torch.promote_types(dtype, torch.float32))
        for index, step in enumerate(self.plan.steps):
            if isinstance(step, PoolStep) and dims == 3 and step.family == "avg" and _exporting_for_torch_runtimes():
                x = avg_pool3d_as_2d(x, step.kernel, step.stride)
            elif isinstance(step, PoolStep):
                pool = _AVG_POOLS[dims] if step.family == "avg" else _MAX_POOLS[dims]
                x = pool(x, step.kernel, step.stride)
            elif isinstance(step, ReduceStep):
                x = _reduce(x, step, dims)
            elif isinstance(step, SlidingWindowStep):
                x = sliding_window_means(x, step, dims, getattr(self, f"indices_{index}"))
            elif isinstance(step, WindowSlicesStep):
                x = window_slice_means(x, step.axis - dims, window_bounds(step.in_size, step.out_size))
            elif isinstance(step, WindowGatherStep):
                if step.zero_padded:  # one zero at the end of the axis, where the padding indices point
                    x = concat_zero(x, step.axis - dims)
                x = torch.index_select(x, step.axis - dims, getattr(self, f"indices_{index}"))
            elif isinstance(step, WindowScaleStep):
                scale = _cast_like(self._weight_for(index, x), x)
                x = x * scale.reshape((-1,) + (1,) * (dims - 1 - step.axis))
            elif isinstance(step, UpsampleStep):
                x = _upsample(x, step, self.batched)
            else:
                raise AssertionError(f"unknown step {step!r}")
        return keep_memory_format(source, x.to(dtype) if upcast else x, dims)

    def onnx_form(self, x: torch.Tensor) -> torch.Tensor:
        """What ONNX export sees (the plan's ``onnx_steps`` where it has them), run in eager."""
        x = check_input(x, self.expected_sizes, self.location)
        if x.dim() == self.plan.spatial_dims + 1:
            return self.onnx_form(x.unsqueeze(0)).squeeze(0)
        return self._run_onnx_steps(x) if self.plan.onnx_steps else self._run(x)

    def _run_onnx_steps(self, x: torch.Tensor) -> torch.Tensor:
        """The plan's ``onnx_steps``: window maxima or window sums by gathers, or block sums or maxima by a
        Reshape, then any upsampling.

        Values only (ONNX graphs are for inference). A maximum rounds nothing; window sums of float16
        and bfloat16 inputs are taken in float32, as PyTorch's average pools accumulate them.
        """
        source, dims, dtype = x, self.plan.spatial_dims, x.dtype
        upcast = self.plan.family == "avg" and dtype in _LOW_PRECISION
        if upcast:
            x = x.float()
        spatial_first = False
        # The TorchScript exporter's Pad computes its pads in a dozen int64 ops (and warns that it cannot
        # fold them); under it each axis gets its zero by a Concat just before its gather instead.
        zero_by_concat: set[int] = set()
        for index, step in enumerate(self.plan.onnx_steps):
            first_spatial = 0 if spatial_first else x.dim() - dims  # where the spatial axes lie now
            if isinstance(step, WindowReduceStep) and step.family == "max" and step.span > WINDOW_MAXIMA_MAX_GATHERS:
                indices = getattr(self, f"indices_onnx_{index}")
                x = window_block_maxima(x, first_spatial + step.axis, indices, step.out_size, step.span)
            elif isinstance(step, WindowReduceStep) and step.family == "max":
                gathers = [getattr(self, f"indices_onnx_{index}_{j}") for j in range(step.span)]
                x = window_maxima(x, first_spatial + step.axis, gathers)
            elif isinstance(step, WindowReduceStep):
                dim = first_spatial + step.axis
                if step.axis in zero_by_concat:
                    x = concat_zero(x, dim)
                x = window_sums(x, dim, getattr(self, f"indices_onnx_{index}"), step.out_size, step.span)
            elif isinstance(step, BlockReduceStep):
                x = block_reduce(x, first_spatial + step.axis, step.family, step.in_size, step.out_size)
            elif isinstance(step, WindowZeroStep) and torch.jit.is_tracing():
                zero_by_concat = set(step.axes)
            elif isinstance(step, WindowZeroStep):
                x = append_zeros(x, [first_spatial + axis for axis in step.axes])
            elif isinstance(step, WindowCountStep):
                counts = getattr(self, f"counts_onnx_{index}").to(x.dtype)
                shape = [1] * x.dim()
                shape[first_spatial : first_spatial + dims] = counts.shape
                x = x / counts.view(shape)
            elif isinstance(step, SpatialLayoutStep):
                x = move_spatial_axes(x, dims, step.spatial_first)
                spatial_first = step.spatial_first
            elif isinstance(step, UpsampleStep):
                x = _upsample(x, step, self.batched)
            else:
                raise AssertionError(f"no ONNX form for step {step!r}")
        return keep_memory_format(source, x.to(dtype) if upcast else x, dims)

    @property
    def runs_native_in_eager(self) -> bool:
        """General max windows run PyTorch's own kernel in eager; tracers get the gather form.

        Both are exact. The gather form copies the input once or twice before its MaxPool (2-4x
        native forward+backward, see the README), and every exact form measured in eager — strided
        window views, per-window argmax gathers — stayed 1.7-4x native with autograd, so eager keeps
        the one kernel that is native speed by definition.
        """
        return self._native_in_eager

    def _weight_for(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The step's window scales in ``x``'s dtype; float64 input gets exact float64 scales."""
        weight = getattr(self, f"weight_{index}")
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and weight.dtype != torch.float64:
            step = self.plan.steps[index]
            assert isinstance(step, WindowScaleStep)
            return self._weight(step, torch.float64, x.device)
        return weight


def normalized_output_size(value: int | None | Sequence[int | None], dims: int, location: str) -> tuple[int | None, ...]:
    """An ``output_size`` as a tuple of ``dims`` entries (``None``: keep the input's size)."""
    sizes = (value,) * dims if value is None or isinstance(value, int) else tuple(value)
    if len(sizes) != dims or any(s is not None and (not isinstance(s, int) or s < 1) for s in sizes):
        raise PoolCallError(f"{_named(location)}: output_size {value!r} is not {dims} positive integers or None")
    return sizes


@lru_cache(maxsize=256)
def planned(family: str, in_sizes: tuple[int, ...], out_sizes: tuple[int, ...], follows: tuple[bool, ...]) -> PoolPlan:
    """``choose_plan``, remembered: a forward that sets its pool's output size on every call plans once per size."""
    return choose_plan(family, in_sizes, out_sizes, follows)  # type: ignore[arg-type]


def native_pool_function(family: str, dims: int) -> Any:
    """PyTorch's functional adaptive pool of this family and number of spatial axes."""
    return (_NATIVE_AVG if family == "avg" else _NATIVE_MAX)[dims]


def native_pool_module(family: str, output_size: tuple[int | None, ...]) -> nn.Module:
    """PyTorch's adaptive pool module of this family and output size."""
    return getattr(nn, f"Adaptive{family.capitalize()}Pool{len(output_size)}d")(output_size)


_SCRIPTED_CHECK: list[Any] = []


def traced_size_check(x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
    """``x``, through a TorchScript function that ``torch.jit.trace`` keeps in its graph: the traced
    module raises at a spatial size other than the one it was converted for, instead of returning wrong
    values (the trace would otherwise bake the traced sizes' windows in)."""
    if not _SCRIPTED_CHECK:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script's deprecation: this is its one use
            _SCRIPTED_CHECK.append(torch.jit.script(_check_sizes_scripted))
    return _SCRIPTED_CHECK[0](x, [-1 if e is None else e for e in expected], location)


def _check_sizes_scripted(x: torch.Tensor, expected: list[int], location: str) -> torch.Tensor:
    spatial = x.shape[x.dim() - len(expected) :]
    for axis in range(len(expected)):
        if expected[axis] >= 0 and spatial[axis] != expected[axis]:
            traced = [("*" if e < 0 else str(e)) for e in expected]
            raise ValueError(
                "fxpool: the adaptive pool at '"
                + location
                + "' of the converted model was traced for spatial size ("
                + ", ".join(traced)
                + ") but got input of shape "
                + str(list(x.shape))
                + ". Trace or export at this "
                "size, or convert with dynamic=True for one graph exact at every size."
            )
    return x


def refuse_empty_torchscript_export(x: torch.Tensor, location: str) -> None:
    """Raise `PoolCallError` for an empty input under the TorchScript ONNX exporter, whose Reshape symbolic
    divides by the element count and kills the process (the stock export of a native pool refuses it too)."""
    shape = tuple(_static_size(s) for s in x.shape)
    if 0 in shape:
        raise PoolCallError(
            f"{_named(location)}: the TorchScript ONNX exporter cannot take an input of shape {shape} (an empty "
            f"axis: its Reshape shape inference divides by zero and crashes the process). Export with a batch of 1 "
            f"and a dynamic batch axis (dynamic_axes={{'input': {{0: 'batch'}}}}): the graph runs empty batches too; "
            f"or use the dynamo exporter (dynamo=True), which takes it."
        )


def onnx_size_guard(x: torch.Tensor, expected: tuple[int | None, ...], location: str = "adaptive pool") -> torch.Tensor:
    """``x``, checked at export and guarded in the graph, for the TorchScript ONNX exporter.

    At export, :class:`_SpatialSizeCheck`'s translation refuses a pool input whose guarded spatial size
    ONNX's shape inference finds dynamic (the caller's ``dynamic_axes``, with or without fxpool's hook):
    :class:`~fxpool.errors.SpatialSizeError`, naming ``dynamic=True``. In the graph, ``x`` reshaped to its
    own shape with the guarded spatial axes as constants: a Reshape that fails, naming both shapes, at an
    input whose element count differs from the one the graph was exported for (where the export could
    not tell, its input's spatial axes static and the pool's input of unknown size).

    The Reshape rides on the data path, where no runtime optimizer can drop it (onnxruntime folds away
    a check on the side, as a Reshape of a constant to the input's length). With static input axes the
    runtime checks the input's declared shape itself.
    """
    x = _SpatialSizeCheck.apply(x, expected, location)
    dims = len(expected)
    sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(expected)]
    return x.reshape(tuple(x.shape[: x.dim() - dims]) + tuple(sizes))


class _SpatialSizeCheck(torch.autograd.Function):
    """The identity while the TorchScript exporter traces; its ONNX translation (``symbolic``) refuses a
    pool input whose guarded spatial sizes shape inference finds dynamic, and emits nothing."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def symbolic(g: Any, x: Any, expected: tuple[int | None, ...], location: str) -> Any:
        from torch.onnx import symbolic_helper

        sizes = symbolic_helper._get_tensor_sizes(x)
        if sizes is None or len(sizes) < len(expected):
            return x  # nothing known here: the Reshape after it guards at run time
        spatial = sizes[len(sizes) - len(expected) :]
        unknown = [axis for axis, (e, s) in enumerate(zip(expected, spatial)) if e is not None and s is None]
        # A size shape inference lost (through an op it cannot follow) is no dynamic axis: refuse only where
        # the graph's inputs have a dynamic axis other than the batch.
        inputs = [symbolic_helper._get_tensor_sizes(value) for value in g.graph.inputs()]
        freed = any(None in (shape or [])[1:] for shape in inputs)
        if unknown and freed:
            traced = tuple("*" if e is None else e for e in expected)
            shape = tuple("?" if s is None else s for s in sizes)
            raise SpatialSizeError(
                f"{_named(location)}: this replacement was specialised for spatial size {traced}, but the ONNX export "
                f"makes its input's spatial size dynamic ({shape}: dynamic_axes); the graph would be wrong at other "
                f"sizes. Keep spatial axes static, or convert with dynamic=True (fxpool.convert(model, example, "
                f"dynamic=True), fxpool.export(..., dynamic=True), fxpool.onnx_export_hook(dynamic=True)) for one "
                f"graph exact at every size."
            )
        return x


_TRACED_FORMS = threading.local()


@contextmanager
def traced_forms() -> Iterator[None]:
    """Within the block (this thread), replacements run in eager what tracers see: the plan's steps
    in order, the gather form for general max windows instead of PyTorch's kernel. For a census of
    the ops a converted model runs (the zoo's), or to time the exported form in eager."""
    saved = getattr(_TRACED_FORMS, "on", False)
    _TRACED_FORMS.on = True
    try:
        yield
    finally:
        _TRACED_FORMS.on = saved


def _exporting_for_torch_runtimes() -> bool:
    """torch.export for a PyTorch runtime (ExecuTorch, AOTInductor), not on its way to ONNX."""
    return torch.compiler.is_exporting() and not torch.onnx.is_in_onnx_export()


def avg_pool3d_as_2d(x: torch.Tensor, kernel: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """A 3d average pool as two 2d ones (an average over a box is the average over D of the averages over
    H and W): ExecuTorch's runtime has no avg_pool3d kernel (a program holding one fails to load), so
    under torch.export fxpool emits this; ONNX has a 3d AveragePool and keeps it."""
    *lead, depth, height, width = x.shape
    if any(isinstance(size, int) and size == 0 for size in lead):  # nothing to pool: a 2d pool refuses 0 channels
        return F.avg_pool3d(x, kernel, stride)
    # 4d tensors throughout: runtimes lay a 2d pool's input out as NCHW (XNNPACK, LiteRT's NHWC transpose)
    planes = F.avg_pool2d(x.reshape(1, -1, height, width), kernel[1:], stride[1:])  # H and W, every (lead, D) plane
    out_h, out_w = planes.shape[-2:]
    columns = F.avg_pool2d(planes.reshape(1, -1, depth, out_h * out_w), (kernel[0], 1), (stride[0], 1))  # D
    return columns.reshape(*lead, columns.shape[-2], out_h, out_w)


def _fast_eager_kind(plan: PoolPlan, native_in_eager: bool, sizes_fixed: bool) -> str:
    """Which one-call eager form a plan has ("" for none): the common one-step plans, run on a contiguous
    float32 tensor of the traced sizes without the general path's checks and loop over steps, which
    cost 5-25 us a call (a GPU shows it: efficientnet's 17 squeeze-excitation means)."""
    if native_in_eager:
        return "native" if sizes_fixed else ""
    if len(plan.steps) != 1:
        return ""
    step = plan.steps[0]
    if isinstance(step, ReduceStep):  # only where no size is guarded, or every one is compared (an axis kept at
        # its traced size, 3x3 -> 1x3, is guarded: at 4x4 the original gives 1x3 and the mean 1x4)
        return "mean" if step.family == "avg" and (sizes_fixed or plan.size_agnostic) else ""
    if isinstance(step, PoolStep) and sizes_fixed:
        return "pool"
    return ""


def _fits(spatial: torch.Size, fixed: tuple[int | None, ...] | None) -> bool:
    """The input's spatial sizes are the traced ones (or, where none are fixed, none is empty)."""
    return spatial == fixed if fixed is not None else 0 not in spatial


def plain_eager() -> bool:
    """Nothing traces, compiles or exports, and no traced_forms block is open: :func:`_exporting`'s
    negation, cheapest question first."""
    return (
        torch._C._get_tracing_state() is None
        and not getattr(_TRACED_FORMS, "on", False)
        and not torch.compiler.is_compiling()
        and not torch.onnx.is_in_onnx_export()
    )


def _exporting() -> bool:
    """An exporter or compiler is tracing: it gets the plan's steps in their order, no eager shortcut."""
    return (
        getattr(_TRACED_FORMS, "on", False)
        or torch.onnx.is_in_onnx_export()
        or torch.jit.is_tracing()
        or torch.compiler.is_compiling()
    )


def _reduce(x: torch.Tensor, step: ReduceStep, dims: int) -> torch.Tensor:
    axes = [a - dims for a in step.axes]
    if step.family == "avg":
        return x.mean(dim=axes, keepdim=True)
    needs_grad = not isinstance(x, torch.Tensor) or (torch.is_grad_enabled() and x.requires_grad)  # a Proxy: keep both
    if torch.onnx.is_in_onnx_export() or not needs_grad:
        return torch.amax(x, dim=axes, keepdim=True)  # one ReduceMax; the values are the same
    # max(dim) sends the gradient to the first maximum (amax splits it among ties); last axis
    # first keeps PyTorch's row-major order.
    for axis in reversed(axes):
        x = torch.max(x, dim=axis, keepdim=True).values
    return x


def _cast_like(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # Under torch.fx both are Proxies, so the cast is recorded rather than decided.
    if isinstance(x, torch.fx.Proxy) or weight.dtype != x.dtype:
        return weight.to(x.dtype)
    return weight


def sliding_window_means(x: torch.Tensor, step: SlidingWindowStep, dims: int, indices: torch.Tensor) -> torch.Tensor:
    """Each window's mean along ``step.axis``: a stride-1 AvgPool per window length (each sums only the
    entries of one window, so a NaN or an infinity stays in the windows that hold it), concatenated,
    then the window starts gathered (:func:`sliding_window_indices`). A length of 1 is the axis itself.
    1d and 2d pools only: planning slices the windows of 3d pools."""
    dim = step.axis - dims
    blocks = []
    for length in step.lengths:
        if length == 1:
            blocks.append(x)
            continue
        kernel = [1] * dims
        kernel[step.axis] = length
        blocks.append(_AVG_POOLS[dims](x, kernel, 1))
    return torch.index_select(torch.cat(blocks, dim) if len(blocks) > 1 else blocks[0], dim, indices)


def window_slice_means(x: torch.Tensor, dim: int, bounds: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Each window's mean along ``dim`` (negative): the window sliced out and averaged, the means
    concatenated. Each mean reads only its window, so a NaN or an infinity stays in the windows that
    hold it."""
    return torch.cat([x.narrow(dim, start, end - start).mean(dim, keepdim=True) for start, end in bounds], dim)


def _upsample(x: torch.Tensor, step: UpsampleStep, batched: bool) -> torch.Tensor:
    dims = len(step.sizes)
    if isinstance(x, torch.Tensor):  # eager: follow the input; under torch.fx, the traced layout
        batched = x.dim() == dims + 2
    sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(step.sizes)]
    if batched:
        return F.interpolate(x, size=sizes, mode="nearest")
    return F.interpolate(x.unsqueeze(0), size=sizes, mode="nearest").squeeze(0)
