"""Adaptive pooling that builds its windows from the size it is given (``dynamic=True``).

Window ``i`` of an axis of runtime length ``L`` pooled to ``o`` is PyTorch's ``[floor(i*L/o), ceil((i+1)*L/o))``,
computed by integer shape arithmetic on the runtime length (Range, Mul, Div in ONNX; SymInt expressions under
``torch.export``, which add no guard). Every window holds ``L // o`` to ``L // o + 2`` entries, so work and
memory are linear in the input. The forms (:class:`~fxpool.planning.DynamicForm`; docs/export.md has the
measurements): ``gathers`` moves the spatial axes in front and gathers and reduces each axis's windows
(:func:`window_sums`, :func:`window_maxima`); ``slices`` slices each window from its runtime bounds, under the
ONNX exporters and ``torch.jit.trace`` (the dynamo exporter's Slices written as ONNX: PyTorch's slices to symbolic
bounds add guards that named Dims refuse). Under the dynamo exporter an average pool's windows that tile are
reshaped instead, behind an If (:mod:`fxpool.tiling`).

Under ONNX export maxima carry what their flag needs from axis to axis (:class:`~fxpool.forms.FlaggedMaxima`: NaN
where a window holds one, -inf where it holds -inf alone, as OpenVINO's ReduceMax does not); under the dynamo exporter
only where the input is not finite, an If asks (:mod:`fxpool.tiling`). No gathered block is ever
empty, at any size: OpenVINO compiles an empty Gather at a static size into SIGFPE, and PyTorch's amax refuses one.
Other tracers get ``torch.max(dim)``, last axis first, so a tie's gradient lands where PyTorch's kernel sends it.
Eager and ``torch.compile`` run PyTorch's own kernel; :meth:`_DynamicPool.traced_form` runs the graph form in eager.
One graph serves every size: no Loop, GatherND or ScatterND."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .forms import (
    LOW_PRECISION,
    FlaggedMaxima,
    append_zeros,
    flagged_reduction,
    flagged_window_maxima,
    keep_memory_format,
    needs_gradient,
    span_sum,
)
from .onnxnodes import quotient, window_slices
from .planning import DynamicKind
from .replacements import native_pool_function, native_pool_module, normalized_output_size
from .sizechecks import check_input, in_onnx_export, plain_eager, static_size, traced_sizes
from .tiling import pooled_where_windows_tile

torch.fx.wrap("check_input")  # a leaf here too, so converted models trace again with torch.fx

SHORT_WINDOWS = 4  # windows shorter than this on average at the size traced sum one zero-padded block (:func:`window_sums`)
GROUPED_BLOCK_BYTES = 2 << 20  # a larger zero-padded block is read for two groups of windows in turn (:func:`window_sums`)
MAX_SINGLES = 8  # window entries gathered one per window before the rest is one block (:func:`window_maxima`)


def _div(numerator: Any, out_size: int) -> Any:
    """``numerator // out_size`` (non-negative: int, SymInt, Proxy, or a tensor: one ONNX Div, exact)."""
    if isinstance(numerator, torch.Tensor):
        return quotient(numerator, out_size)
    return numerator // out_size


def runtime_window_bounds(length: Any, out_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every window's start ``floor(i*L/o)`` and end ``ceil((i+1)*L/o)`` from a runtime length (int, SymInt, 0-d
    tensor), as ``i * (L // o) + floor(i * (L % o) / o)``: the vector divided stays below ``o * (o + 1)``, where even
    a division through float32 is exact (``o < 4096``: the dynamo ONNX exporter lowers ``torch.div`` of int64 tensors
    so, which ``torch.onnx.export`` of a ``torch.export`` program of this form meets) and int32 holds it."""
    steps = torch.arange(out_size, device=device)
    whole = _div(length, out_size)
    rest = length - whole * out_size
    starts = steps * whole + _div(steps * rest, out_size)
    ends = (steps + 1) * whole + _div((steps + 1) * rest + (out_size - 1), out_size)
    return starts, ends


def gather_windows(x: torch.Tensor, dim: int, indices: torch.Tensor) -> torch.Tensor:
    """``x``'s entries at ``indices`` (``(o, span)``) along ``dim``; index_select under torch.export, where indexing is GatherND."""
    if torch.jit.is_tracing():
        return x[(slice(None),) * dim + (indices,)]
    return x.index_select(dim, indices.reshape(-1)).unflatten(dim, (indices.shape[0], indices.shape[1]))


def spatial_first(x: torch.Tensor, dims: int, zero_after: int | None = None) -> torch.Tensor:
    """``(*lead, *spatial)`` as a contiguous ``(*spatial, B)``, the leading axes flattened into one: one
    Transpose in ONNX (the flattening and its undoing are Reshapes, no copy). Every rank after it is known,
    under ``torch.fx`` too. A clone, not ``.contiguous()``: asking whether it is contiguous already guards on
    the sizes (it is, at size 1), and the dynamo ONNX exporter drops the guard. With ``zero_after``, a zero
    is appended to that spatial axis in the same copy (:func:`window_sums` of short windows reads it)."""
    moved = x.flatten(0, -dims - 1).permute(list(range(1, dims + 1)) + [0])
    if zero_after is not None:
        return append_zeros(moved, [zero_after], dims + 1)  # contiguous: the padded copy is a new tensor
    return moved.clone(memory_format=torch.contiguous_format)


def spatial_back(y: torch.Tensor, lead: Any, dims: int) -> torch.Tensor:
    """:func:`spatial_first` undone."""
    return y.permute([dims] + list(range(dims))).clone(memory_format=torch.contiguous_format).unflatten(0, lead)


def _along(mask: torch.Tensor, dim: int, dims: int) -> torch.Tensor:
    """An ``(o, k)`` mask shaped to broadcast against a block gathered at spatial axis ``dim`` of ``dims``."""
    return mask.reshape(mask.shape + (1,) * (dims - dim))


def _symbolic(length: Any) -> bool:
    """Whether ``length`` is symbolic (``torch.export``, ``torch.fx``): a block that may hold 0 or 1 entries adds a
    guard named Dims refuse there, so blocks are ``ceil(L/o) + 1 >= 2``."""
    return isinstance(length, (torch.SymInt, torch.fx.Proxy)) or torch.compiler.is_compiling()  # strict export: dynamo's


def short_windows(length: Any, out_size: int) -> bool:
    """Whether an axis's windows are short (:data:`SHORT_WINDOWS`) at the size traced, not symbolic."""
    return out_size > 1 and not _symbolic(length) and static_size(length) < SHORT_WINDOWS * out_size


def window_sums(
    y: torch.Tensor, dim: int, dims: int, out_size: int, zero_appended: bool = False, block_bytes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each window's sum along spatial axis ``dim`` of a :func:`spatial_first` tensor, and its size (``(o,)``).
    Short windows (:func:`short_windows`) and symbolic lengths gather ``ceil(L/o) + 1`` entries each from the tensor
    with a zero appended (one Pad, unless ``zero_appended`` says :func:`spatial_first` appended it), reading the zero
    past the window's end: one Gather and one ReduceSum, as the static form; a block of :data:`GROUPED_BLOCK_BYTES`
    or more at the size traced (``block_bytes``, from :func:`block_bytes_traced`; None: unknown) is read for two groups
    of windows in turn. In onnxruntime at one thread that held
    0.68-0.91x the memory in the TorchScript exporter's graphs (10->7 over 8x512, 13->6 over 2048 channels) and
    0.67-0.88x in the dynamo exporter's (those, 33->6, 1d 1000->101, 14->7), for 0.85-1.07x the time; smaller
    blocks ran up to 1.37x slower in halves.
    Longer ones sum their first ``max(L // o, 1)`` entries unmasked (:func:`_in_groups`), and the at most two past
    them are gathered one per window and masked to zero by Where past the window's end (less memory)."""
    length = y.shape[dim] - 1 if zero_appended else y.shape[dim]
    starts, ends = runtime_window_bounds(length, out_size, y.device)
    if out_size == 1:
        return span_sum(y, dim, dims + 1).unsqueeze(dim), ends - starts
    symbolic = _symbolic(length)
    if symbolic or short_windows(length, out_size):  # past its end a window reads the zero appended at ``length``
        positions = _positions(starts, 0, _div(length + (out_size - 1), out_size) + 1, y)
        padded = torch.where(positions < ends.unsqueeze(1), positions, length)
        padded_y = y if zero_appended else append_zeros(y, [dim], dims + 1)

        def block_sums(rows: slice) -> torch.Tensor:  # each group's block dies in its sum
            # not padded[:], a Slice the dynamo exporter drops inside an If, leaving its bounds behind
            group = padded if rows == slice(None) else padded[rows]
            return span_sum(gather_windows(padded_y, dim, group), dim + 1, dims + 2)

        return _in_groups(out_size, block_bytes, GROUPED_BLOCK_BYTES, dim, block_sums), ends - starts
    fewest = _at_least_one(_div(length, out_size))

    def unmasked_sums(rows: slice) -> torch.Tensor:  # each group's gathered entries die in its sum
        return span_sum(gather_windows(y, dim, _positions(starts[rows], 0, fewest, y)), dim + 1, dims + 2)

    sums = _in_groups(out_size, fewest, 4, dim, unmasked_sums)
    for beyond in range(2):
        extra = starts + fewest + beyond  # its gathered entries die inside the Where: no third copy lives
        sums = sums + torch.where(_along(extra < ends, dim, dims), y.index_select(dim, torch.minimum(extra, ends - 1)), 0.0)
    return sums, ends - starts


def traced_shape(x: torch.Tensor) -> tuple[int, ...] | None:
    """``x``'s shape at the size traced (:func:`~fxpool.sizechecks.traced_sizes`), read where no tracer guards on it:
    not under dynamo (inside ``torch.cond``'s branches it turned the read into a guard, which named Dims refuse);
    None there, under torch.fx, or where a size is unknown."""
    if isinstance(x, torch.fx.Proxy) or torch.compiler.is_dynamo_compiling():
        return None
    return traced_sizes(x.shape)


def block_bytes_traced(traced: tuple[int, ...] | None, dims: int, axis: int, out_size: int, x: torch.Tensor) -> int | None:
    """The bytes of the zero-padded block :func:`window_sums` gathers of ``x`` along spatial axis ``axis`` of ``dims``,
    from the traced shape of the tensor so far (``(*lead, *spatial)``; None: unknown)."""
    if traced is None:
        return None
    length = traced[axis - dims]
    others = math.prod(traced) // max(length, 1)
    return out_size * ((length + out_size - 1) // out_size + 1) * others * x.element_size()


def _in_groups(out_size: int, count: Any, smallest: int, dim: int, reduce: Callable[[slice], torch.Tensor]) -> torch.Tensor:
    """``reduce`` (of a slice of the windows) over two groups of windows, concatenated along ``dim``, where ``count``
    (entries or bytes read) reaches ``smallest`` at the size traced (half a block lives at once), else (or where it
    is None, unknown) over all."""
    if count is None or static_size(count) < smallest:
        return reduce(slice(None))
    half = (out_size + 1) // 2
    return torch.cat([reduce(slice(0, half)), reduce(slice(half, None))], dim)


def _at_least_one(count: Any) -> Any:
    """``max(count, 1)`` for an int or a size tensor under ``torch.jit.trace``."""
    return count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1)


def _first_maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` (earlier positions) unless ``b`` is greater or NaN, as PyTorch's pools pick: a tie's gradient goes to ``a``."""
    return torch.where((b > a) | torch.isnan(b), b, a)


def window_maxima(y: torch.Tensor, dim: int, out_size: int) -> torch.Tensor:
    """Each window's maximum along ``dim`` over ``ceil(L/o) + 1`` entries from its start (a shorter window repeats
    its last, after the entries it copies, so ``torch.max`` finds the first). At a symbolic length (:func:`_symbolic`)
    one block; otherwise the entries of the size traced but one (at most :data:`MAX_SINGLES`) are gathered one per
    window and combined by Max, the rest make one block (for two groups of windows in turn), never empty. A
    gradient takes ``torch.max`` and :func:`_first_maximum`. ONNX export takes :func:`flagged_block_maxima`."""
    length = y.shape[dim]
    grad = needs_gradient(y)
    if out_size == 1:
        return _block_maximum(y.unsqueeze(dim), dim + 1, grad)  # one window, the whole axis
    starts, ends = runtime_window_bounds(length, out_size, y.device)
    span = _div(length + (out_size - 1), out_size) + 1
    if _symbolic(length):
        return _block_maximum(gather_windows(y, dim, _positions(starts, 0, span, y, ends)), dim + 1, grad)
    singles = min(MAX_SINGLES, static_size(span) - 1)
    combine = _first_maximum if grad else torch.maximum
    result = y.index_select(dim, starts)  # each entry dies inside its Max
    for offset in range(1, singles):
        result = combine(result, y.index_select(dim, torch.minimum(starts + offset, ends - 1)))
    rest = _at_least_one(span - singles)  # traced, run at a smaller size: a repeat of the window's last entry

    def block_maxima(rows: slice) -> torch.Tensor:  # each group's block dies in its reduction
        return _block_maximum(gather_windows(y, dim, _positions(starts[rows], singles, rest, y, ends[rows])), dim + 1, grad)

    return combine(result, _in_groups(out_size, rest, 2, dim, block_maxima))


def flagged_block_maxima(entries: torch.Tensor | FlaggedMaxima, dim: int, out_size: int) -> FlaggedMaxima:
    """Under ONNX export, each window's ``ceil(L/o) + 1`` entries from its start (a shorter window repeating its last)
    as one block along ``dim``, reduced three ways for the flag (:func:`~fxpool.forms.flagged_reduction`); an earlier
    axis's reductions are gathered and reduced part by part, and flagged once after the last axis."""
    like = entries.maxima if isinstance(entries, FlaggedMaxima) else entries
    if out_size == 1:  # one window, the whole axis
        return flagged_reduction(entries, lambda t: t.unsqueeze(dim), dim + 1)
    length = like.shape[dim]
    starts, ends = runtime_window_bounds(length, out_size, like.device)
    positions = _positions(starts, 0, _div(length + (out_size - 1), out_size) + 1, like, ends)
    return flagged_reduction(entries, lambda t: gather_windows(t, dim, positions), dim + 1)


def _positions(starts: torch.Tensor, offset: Any, count: Any, y: torch.Tensor, ends: Any = None) -> torch.Tensor:
    """``(o, count)``: every window's positions ``offset .. offset + count - 1`` from its start (at most its last)."""
    positions = starts.unsqueeze(1) + offset + torch.arange(count, device=y.device)
    return positions if ends is None else torch.minimum(positions, ends.unsqueeze(1) - 1)


def _block_maximum(windows: torch.Tensor, dim: int, grad: bool) -> torch.Tensor:
    """The maximum over ``dim``: ``torch.max`` for a gradient (to the first maximum), ``amax`` for values."""
    return torch.max(windows, dim).values if grad else windows.amax(dim)


def slice_reduce(y: torch.Tensor, dim: int, out_size: int, family: str, grad: bool = True) -> torch.Tensor:
    """Each window sliced from its runtime bounds along ``dim`` (:func:`_sliced_windows`) and reduced (its mean, or
    its maximum: ``torch.max`` where ``grad``, for a tie's gradient), the results concatenated: one Slice and one
    ReduceMean/ReduceMax per window. ONNX export's maxima of entries that may not be finite take
    :func:`flagged_slice_maxima`."""
    windows = _sliced_windows(y, dim, *runtime_window_bounds(y.shape[dim], out_size, y.device))
    return torch.stack([window.mean(dim) if family == "avg" else _block_maximum(window, dim, grad) for window in windows], dim)


def flagged_slice_maxima(y: torch.Tensor, dim: int, out_size: int) -> torch.Tensor:
    """Under ONNX export, each window sliced from its runtime bounds along ``dim``, reduced and flagged window by window
    (:func:`~fxpool.forms.flagged_window_maxima`)."""
    windows = _sliced_windows(y, dim, *runtime_window_bounds(y.shape[dim], out_size, y.device))
    return flagged_window_maxima(windows, dim, keepdim=False)


def _sliced_windows(y: torch.Tensor, dim: int, starts: torch.Tensor, ends: torch.Tensor) -> list[torch.Tensor]:
    """Every window ``[starts[i], ends[i])`` of ``y`` along ``dim``. Under ``torch.export`` (the dynamo ONNX exporter)
    ONNX's own Slices (:func:`~fxpool.onnxnodes.window_slices`): PyTorch's slice to symbolic bounds adds guards."""
    if torch.compiler.is_exporting():
        return window_slices(y, dim, starts, ends)
    before = (slice(None),) * dim
    return [y[before + (slice(starts[i], ends[i]),)] for i in range(starts.shape[0])]


def runs_natively(x: torch.Tensor) -> bool:
    """Eager and torch.compile run PyTorch's own kernel (exact, native speed by definition); exporters,
    ``torch.jit.trace``, ``torch.fx`` and :func:`~fxpool.sizechecks.traced_forms` get the graph form."""
    if not isinstance(x, torch.Tensor):
        return False
    return plain_eager() or (torch.compiler.is_compiling() and not torch.compiler.is_exporting())


class _DynamicPool(nn.Module):
    """What both dynamic pools share: their output size, form, name in errors and native reference."""

    family = ""

    def __init__(self, out_sizes: tuple[int | None, ...], location: str = "adaptive pool", kind: DynamicKind = "gathers") -> None:
        super().__init__()
        if kind not in ("gathers", "slices"):
            raise ValueError(f"kind must be 'gathers' or 'slices', got {kind!r}")
        self.out_sizes = tuple(out_sizes)
        self.location = location
        self.kind = kind

    @property
    def fxpool_native_reference(self) -> tuple[str, tuple[int | None, ...]]:
        """The family and output_size of the native pool this module stands for (for the self-check)."""
        return self.family, self.out_sizes

    @property
    def output_size(self) -> tuple[int | None, ...]:
        """The output size, as the native module holds it; assigning one takes effect at the next call."""
        return self.out_sizes

    @output_size.setter
    def output_size(self, value: int | None | tuple[int | None, ...]) -> None:
        self.out_sizes = normalized_output_size(value, len(self.out_sizes), self.location)

    @property
    def runs_native_in_eager(self) -> bool:
        """Eager runs PyTorch's kernel, tracers the graph form: the self-check runs :meth:`traced_form` too."""
        return True

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` gets the native pool this module stands for (same function, scriptable)."""
        return native_pool_module(self.family, self.out_sizes)

    def extra_repr(self) -> str:
        return f"output_size={self.out_sizes}, windows from the runtime size ({self.kind})"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_input(x, (None,) * len(self.out_sizes), self.location)
        if runs_natively(x):
            return self._native(x)
        return self._graph(x)

    def traced_form(self, x: torch.Tensor) -> torch.Tensor:
        """What exporters, ``torch.jit.trace`` and ``torch.fx`` see, run in eager (without ONNX's NaN flags)."""
        return self._graph(check_input(x, (None,) * len(self.out_sizes), self.location))

    def _native(self, x: torch.Tensor) -> torch.Tensor:
        """PyTorch's own adaptive pool this module stands for."""
        dims = len(self.out_sizes)
        sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(self.out_sizes)]
        return native_pool_function(self.family, dims)(x, sizes)

    def _graph(self, x: torch.Tensor) -> torch.Tensor:
        """The window gathers (or slices) for every size (:meth:`_windows`); under the dynamo ONNX exporter an If
        that reshapes instead where the windows tile (:mod:`fxpool.tiling`). Averages sum in float32, as PyTorch."""
        source, dtype, onnx = x, x.dtype, in_onnx_export()
        upcast = self.family == "avg" and (not isinstance(dtype, torch.dtype) or dtype in LOW_PRECISION)  # a Proxy: cast
        if upcast:
            x = x.to(torch.promote_types(dtype, torch.float32))  # rounded once, as PyTorch does
        # dynamo traces the branches: they get ``onnx`` (it answers False for is_in_onnx_export) and the traced shape
        traced = traced_shape(x)
        x = pooled_where_windows_tile(x, self.out_sizes, self.family, lambda y, finite: self._windows(y, onnx, finite, traced))
        return keep_memory_format(source, x.to(dtype) if upcast else x, len(self.out_sizes))

    def _pooled(self) -> list[tuple[int, int]]:
        return [(axis, size) for axis, size in enumerate(self.out_sizes) if size is not None]

    def _windows(self, x: torch.Tensor, onnx: bool, finite: bool = False, traced: tuple[int, ...] | None = None) -> torch.Tensor:
        """The pool of ``x`` by the module's form; ``finite`` where an If has found every entry finite, so that ONNX
        maxima need no flag; ``traced``: ``x``'s shape at the size traced (:func:`traced_shape`)."""
        raise NotImplementedError

    def _slicing(self, onnx: bool) -> bool:
        """Window slices where the form is ``slices`` and an ONNX exporter (or ``torch.jit.trace``) traces."""
        return self.kind == "slices" and (torch.jit.is_tracing() or (onnx and torch.compiler.is_exporting()))


def shrinking_first(pooled: list[tuple[int, int]], x: torch.Tensor, dims: int) -> list[tuple[int, int]]:
    """The pooled ``(axis, out_size)`` most-shrinking first at ``x``'s size, so later axes gather from less; in
    the given order where a length is not a plain int (symbolic under torch.export: comparing would guard)."""
    lengths = [x.shape[axis - dims] for axis, _ in pooled]
    if torch.compiler.is_compiling() or not all(type(length) is int for length in lengths):
        return pooled
    return [p for _, p in sorted(zip(lengths, pooled), key=lambda entry: entry[1][1] / entry[0])]


class DynamicAdaptiveAvgPool(_DynamicPool):
    """Exact adaptive average pooling at any input size, with export-friendly ops."""

    family = "avg"

    def _windows(self, x: torch.Tensor, onnx: bool, finite: bool = False, traced: tuple[int, ...] | None = None) -> torch.Tensor:
        dims, pooled = len(self.out_sizes), self._pooled()
        if self._slicing(onnx):
            for axis, size in pooled:
                x = slice_reduce(x, x.dim() - dims + axis, size, "avg")
        elif pooled:
            lead, order = x.shape[:-dims], shrinking_first(pooled, x, dims)
            first, first_size = order[0]
            padded = _symbolic(x.shape[first - dims]) or short_windows(x.shape[first - dims], first_size)
            x = spatial_first(x, dims, first if padded else None)
            counts = None
            for axis, size in order:
                block_bytes = block_bytes_traced(traced, dims, axis, size, x)
                x, count = window_sums(x, axis, dims, size, padded and axis == first, block_bytes)
                if traced is not None:  # the axis pooled, for the next axis's block
                    traced = tuple(size if i == len(traced) - dims + axis else n for i, n in enumerate(traced))
                count = count.to(x.dtype).reshape([-1 if a == axis else 1 for a in range(dims)])
                counts = count if counts is None else counts * count
            assert counts is not None
            x = spatial_back(x / counts.unsqueeze(-1), lead, dims)
        return x


class DynamicAdaptiveMaxPool(_DynamicPool):
    """Exact adaptive max pooling at any input size, with export-friendly ops."""

    family = "max"

    def _windows(self, x: torch.Tensor, onnx: bool, finite: bool = False, traced: tuple[int, ...] | None = None) -> torch.Tensor:
        dims, pooled = len(self.out_sizes), self._pooled()
        flagged = onnx and not finite  # ONNX's ReduceMax skips NaN (onnxruntime) or starts from the lowest float (OpenVINO)
        if needs_gradient(x) and not onnx:
            pooled.reverse()  # last axis first: the first maximum in row-major order takes a tie's gradient
        else:
            pooled = shrinking_first(pooled, x, dims)
        if not pooled:
            return x
        if self._slicing(onnx):
            for axis, size in pooled:
                dim = x.dim() - dims + axis
                x = flagged_slice_maxima(x, dim, size) if flagged else slice_reduce(x, dim, size, "max", not onnx)
            return x
        lead = x.shape[:-dims]
        entries: torch.Tensor | FlaggedMaxima = spatial_first(x, dims)
        for axis, size in pooled:  # spatial first: the pooled axes lead
            if flagged:  # the flag's reductions carried from axis to axis, flagged once
                entries = flagged_block_maxima(entries, axis, size)
            else:
                assert not isinstance(entries, FlaggedMaxima)  # a Proxy under torch.fx
                entries = window_maxima(entries, axis, size)
        return spatial_back(entries.value() if isinstance(entries, FlaggedMaxima) else entries, lead, dims)
