"""The modules that stand in for adaptive pools: exact, shape-specialised, export-friendly.

:class:`ExactAdaptivePool` runs the steps of a :class:`~fxpool.planning.PoolPlan` with plain ops
(``avg_pool``/``max_pool``, ``mean``/``max``, ``matmul``, constant ``index_select``, nearest
``interpolate``): exporters (``torch.onnx``, ``torch.export`` and what builds on it: ExecuTorch,
AOTInductor), ``torch.jit.trace`` and ``torch.fx`` see the steps in the plan's order. ``torch.compile``
is not an exporter: it gets PyTorch's own adaptive pool, which inductor lowers exactly and faster.
Eager runs the average family's commuting steps in ``PoolPlan.eager_order``, one-step plans in one
call, and general max windows by PyTorch's own kernel (``runs_native_in_eager``), all measured faster
there; :func:`traced_forms` makes eager run what tracers see. Averaging matrices and window indices
are non-persistent buffers: they follow ``.to(device)``, are left out of ``state_dict`` (so the
converted model loads the original's weights), and are rebuilt exactly after a dtype change, so
``.double()`` stays exact to float64.

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
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from .errors import PoolCallError, SpatialSizeError
from .planning import (
    KroneckerStep,
    MatmulStep,
    PoolPlan,
    PoolStep,
    ReduceStep,
    UpsampleStep,
    WindowGatherStep,
    WindowMaxStep,
    WindowScaleStep,
    axis_names,
)
from .windows import window_bounds

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_AVG_POOLS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_MAX_POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_NATIVE_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
_NATIVE_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


def averaging_matrix(
    in_size: int, out_size: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> torch.Tensor:
    """The (out_size x in_size) matrix whose row i averages window i, built in float64 then cast."""
    matrix = torch.zeros(out_size, in_size, dtype=torch.float64)
    for i, (start, end) in enumerate(window_bounds(in_size, out_size)):
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix.to(dtype=dtype, device=device)


def kronecker_matrix(
    in_sizes: Sequence[int], out_sizes: Sequence[int], dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> torch.Tensor:
    """The (prod(out) x prod(in)) averaging matrix over row-major flattened axes."""
    matrix = torch.ones(1, 1, dtype=torch.float64)
    for i, o in zip(in_sizes, out_sizes):
        matrix = torch.kron(matrix, averaging_matrix(i, o))
    return matrix.to(dtype=dtype, device=device)


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


def window_max_indices(in_size: int, out_size: int, span: int) -> list[torch.Tensor]:
    """``span`` index vectors of ``out_size`` entries: vector ``j`` holds position ``j`` of every window,
    a window shorter than ``span`` repeating its last position, so the elementwise maximum of the
    gathered vectors is each window's maximum."""
    bounds = window_bounds(in_size, out_size)
    return [torch.tensor([min(start + j, end - 1) for start, end in bounds], dtype=torch.int64) for j in range(span)]


def window_maxima(x: torch.Tensor, dim: int, gathers: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each window's maximum along ``dim``: the elementwise maximum of ``x`` gathered at each index vector
    of :func:`window_max_indices`. Exports as Gather and Max; Max propagates NaN (onnxruntime's MaxPool
    and ReduceMax skip it)."""
    result = torch.index_select(x, dim, gathers[0])
    for indices in gathers[1:]:
        result = torch.maximum(result, torch.index_select(x, dim, indices))
    return result


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
    if type(x) is torch.Tensor and not torch.jit.is_tracing() and x.is_floating_point():  # eager: the common case
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
    if any(is_concrete_int(s) and s == 0 for s in spatial):
        raise PoolCallError(
            f"{_named(location)}: input of shape {shape} has an empty spatial axis; adaptive pooling needs non-zero "
            f"spatial sizes, as the original pool does."
        )
    if not any(e is not None for e in expected):
        return x
    seen = spatial
    traced = tuple("*" if e is None else e for e in expected)
    if any(e is not None and not is_concrete_int(s) for e, s in zip(expected, seen)):
        raise SpatialSizeError(
            f"{_named(location)}: this replacement was specialised for spatial size {traced}, but it is being "
            f"exported with a dynamic spatial size ({shape}); the graph would be wrong at "
            f"other sizes. Keep spatial axes static, or convert with dynamic=True "
            f"(fxpool.export(..., dynamic=True)) for one graph exact at every size."
        )
    if len(shape) < len(expected) or any(e is not None and e != s for e, s in zip(expected, seen)):
        raise SpatialSizeError(
            f"{_named(location)}: this replacement was specialised for spatial size {traced} but got input of "
            f"shape {shape} (spatial {seen}). Convert again with an example input of this "
            f"size (fxpool.convert(model, example)), or convert with dynamic=True for one model "
            f"that serves every size."
        )
    return x


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
        quantizable: bool = False,
    ) -> None:
        super().__init__()
        self.plan = plan
        self.location = location
        self.batched = batched  # the traced input had a batch axis (eager follows the input's rank)
        # Traced (ONNX, torch.export), averaging matrices as an einsum, which INT8 quantizers leave in float.
        self.quantizable = quantizable
        expected: list[int | None] = [None] * plan.spatial_dims
        for axis in plan.guarded_axes:
            expected[axis] = plan.in_sizes[axis]
        self.expected_sizes: tuple[int | None, ...] = tuple(expected)
        self._native_in_eager = plan.family == "max" and any(a.kind == "gather" for a in plan.axes)
        self._step_order = tuple(range(len(plan.steps)))
        self._build_constants(weight_dtype, device)
        # Every spatial size fixed: the eager fast path compares the input's with one tuple.
        self._fixed_sizes = self.expected_sizes if None not in self.expected_sizes else None
        self._fast = _fast_eager_kind(plan, self._native_in_eager, self._fixed_sizes is not None)

    def _build_constants(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        """(Re)build the averaging matrices (in ``dtype``) and window indices, exactly, on ``device``."""
        for index, step in enumerate(self.plan.steps):
            if isinstance(step, WindowGatherStep):
                indices = window_gather_indices(step.in_size, step.out_size, step.span, step.zero_padded)
                self.register_buffer(f"indices_{index}", indices.to(device), persistent=False)
            elif isinstance(step, (MatmulStep, KroneckerStep, WindowScaleStep)):
                self.register_buffer(f"weight_{index}", self._weight(step, dtype, device), persistent=False)
        for index, step in enumerate(self.plan.onnx_steps):
            if isinstance(step, WindowMaxStep):
                for j, indices in enumerate(window_max_indices(step.in_size, step.out_size, step.span)):
                    self.register_buffer(f"indices_onnx_{index}_{j}", indices.to(device), persistent=False)

    @staticmethod
    def _weight(
        step: MatmulStep | KroneckerStep | WindowScaleStep, dtype: torch.dtype, device: torch.device | str | None
    ) -> torch.Tensor:
        if isinstance(step, MatmulStep):
            return averaging_matrix(step.in_size, step.out_size, dtype, device)
        if isinstance(step, WindowScaleStep):
            return window_scales(step.in_size, step.out_size, step.span).to(dtype=dtype, device=device)
        return kronecker_matrix(step.in_sizes, step.out_sizes, dtype, device)

    def _apply(self, fn, recurse: bool = True):
        # A dtype change would round the averaging weights, and to_empty() would leave them (and the
        # window indices) uninitialised: rebuild every constant exactly after any conversion.
        super()._apply(fn, recurse)
        constants = [b for name, b in self.named_buffers(recurse=False) if name.startswith(("weight_", "indices_"))]
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
            and _plain_eager()  # before reading sizes: under torch.jit.trace they are tensors
            and _fits(x.shape[-self.plan.spatial_dims :], self._fixed_sizes)
        ):
            return self._run_fast(x, fast)
        x = check_input(x, self.expected_sizes, self.location)
        if torch.compiler.is_compiling() and not torch.compiler.is_exporting():
            # torch.compile is not an exporter: inductor lowers PyTorch's own pool exactly, and faster
            # than the plain-op form (compiled, 2-8x on the CPU; the H200 run: 1.4-1.6x).
            return self._native(x)
        eager = isinstance(x, torch.Tensor) and not _exporting()  # not a Proxy, nothing traces
        if eager and self.runs_native_in_eager:
            return self._native(x)
        if not eager and self.plan.onnx_steps and torch.onnx.is_in_onnx_export():
            return self._run_onnx_steps(x)
        return self._run(x, eager)

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
            return _NATIVE_MAX[dims](x, list(plan.out_sizes))
        if kind == "mean":
            return x.mean([a - dims for a in step.axes], keepdim=True)  # type: ignore[union-attr]
        if kind == "pool":
            assert isinstance(step, PoolStep)
            return (_AVG_POOLS if step.family == "avg" else _MAX_POOLS)[dims](x, step.kernel, step.stride)
        y = F.linear(x.flatten(-dims), self.get_buffer("weight_0"))  # kind == "kronecker"
        return y.reshape(y.shape[:-1] + plan.out_sizes)

    def traced_form(self, x: torch.Tensor) -> torch.Tensor:
        """What exporters, ``torch.jit.trace``, ``torch.compile`` and ``torch.fx`` see, run in eager.

        The self-check runs it beside ``forward`` where the two differ, so the form that is exported
        is proven on the example too.
        """
        return self._run(check_input(x, self.expected_sizes, self.location), eager=False)

    def _run(self, x: torch.Tensor, eager: bool) -> torch.Tensor:
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
        order = (self.plan.eager_order if eager else ()) or self._step_order
        einsum = self.quantizable and not eager  # every tracer: ONNX's quantizers and pt2e's alike skip an einsum
        for index in order:
            step = self.plan.steps[index]
            if isinstance(step, PoolStep) and dims == 3 and step.family == "avg" and _exporting_for_torch_runtimes():
                x = avg_pool3d_as_2d(x, step.kernel, step.stride)
            elif isinstance(step, PoolStep):
                pool = _AVG_POOLS[dims] if step.family == "avg" else _MAX_POOLS[dims]
                x = pool(x, step.kernel, step.stride)
            elif isinstance(step, ReduceStep):
                x = _reduce(x, step, dims)
            elif isinstance(step, MatmulStep) and einsum:
                x = einsum_along(x, self._weight_for(index, x), step.axis - dims)
            elif isinstance(step, MatmulStep):
                x = matmul_along(
                    x,
                    self._weight_for(index, x),
                    step.axis - dims,
                    last_step=index == order[-1],
                    exporting=not eager and torch.onnx.is_in_onnx_export(),
                )
            elif isinstance(step, KroneckerStep):
                x = _kronecker(x, self._weight_for(index, x), step, einsum)
            elif isinstance(step, WindowGatherStep):
                if step.zero_padded:  # one zero at the end of the axis, where the padding indices point
                    x = torch.cat([x, torch.zeros_like(x.narrow(step.axis - dims, 0, 1))], step.axis - dims)
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
        return self._run_onnx_steps(x) if self.plan.onnx_steps else self._run(x, eager=False)

    def _run_onnx_steps(self, x: torch.Tensor) -> torch.Tensor:
        """The plan's ``onnx_steps``: window maxima by gathers and elementwise maxima, then any upsampling.

        Values only (ONNX graphs are for inference), exact in every dtype: a maximum rounds nothing.
        """
        source, dims = x, self.plan.spatial_dims
        for index, step in enumerate(self.plan.onnx_steps):
            if isinstance(step, WindowMaxStep):
                gathers = [getattr(self, f"indices_onnx_{index}_{j}") for j in range(step.span)]
                x = window_maxima(x, step.axis - dims, gathers)
            elif isinstance(step, UpsampleStep):
                x = _upsample(x, step, self.batched)
            else:
                raise AssertionError(f"no ONNX form for step {step!r}")
        return keep_memory_format(source, x, dims)

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
        """The step's matrix in ``x``'s dtype; float64 input gets an exact float64 matrix."""
        weight = getattr(self, f"weight_{index}")
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and weight.dtype != torch.float64:
            step = self.plan.steps[index]
            assert isinstance(step, (MatmulStep, KroneckerStep, WindowScaleStep))
            return self._weight(step, torch.float64, x.device)
        return weight


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
    if isinstance(step, ReduceStep):
        return "mean" if step.family == "avg" else ""
    if isinstance(step, PoolStep) and sizes_fixed:
        return "pool"
    if isinstance(step, KroneckerStep) and sizes_fixed and len(step.axes) == plan.spatial_dims:
        return "kronecker"
    return ""


def _fits(spatial: torch.Size, fixed: tuple[int | None, ...] | None) -> bool:
    """The input's spatial sizes are the traced ones (or, where none are fixed, none is empty)."""
    return spatial == fixed if fixed is not None else 0 not in spatial


def _plain_eager() -> bool:
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


def matmul_along(
    x: torch.Tensor, weight: torch.Tensor, dim: int, last_step: bool = True, exporting: bool | None = None
) -> torch.Tensor:
    """Average along ``dim`` (negative) by its (out x in) matrix.

    Axis -1 is one F.linear. Axis -2 is one broadcast matmul ``weight @ x`` under ONNX export
    (onnxruntime runs it 25-35% faster than Transpose, MatMul, Transpose; 33->6 and 64->6, C=512),
    and in eager where ``x`` is contiguous and more steps follow: the batched GEMMs read the input in
    place (64->6 then a W step: 0.97x native forward+backward against 1.19x). As the last step, or on
    a channels-last input, the axis is moved last and made contiguous for one large F.linear instead:
    the user's upstream gradient may be an expanded (stride 0) tensor, as after ``.sum()``, which
    sends a batched matmul's backward into a per-matrix loop (33->(6, 33): 1.77x native against
    0.76x), and a channels-last input would be copied by the batched form anyway (1.6x against 1.0x).
    """
    weight = _cast_like(weight, x)
    if dim == -1:
        return F.linear(x.contiguous(), weight)
    if exporting is None:
        exporting = torch.onnx.is_in_onnx_export()
    if dim == -2 and (exporting or (not last_step and isinstance(x, torch.Tensor) and x.is_contiguous())):
        return torch.matmul(weight, x)
    return F.linear(x.transpose(dim, -1).contiguous(), weight).transpose(dim, -1)


def einsum_along(x: torch.Tensor, weight: torch.Tensor, dim: int) -> torch.Tensor:
    """Average along ``dim`` (negative) by its (out x in) matrix as one einsum (``quantizable=True``).

    onnxruntime's quantizers (``quantize_dynamic``, ``quantize_static`` in QDQ) quantize every MatMul,
    the averaging matrix as an 8-bit weight whose 1/k entries do not survive, but leave an ONNX
    ``Einsum`` in float, as they leave the native AveragePool and ReduceMean. Under ``torch.export`` the
    einsum becomes a batched matmul, which PyTorch 2 export quantizers (XNNPACK's) leave in float too,
    where ``F.linear`` would be quantized and requantized after every axis.
    """
    letters = "abcdefgh"[:-dim]
    out = "z" + letters[1:]
    return torch.einsum(f"...{letters},z{letters[0]}->...{out}", x, _cast_like(weight, x))


def _kronecker(x: torch.Tensor, weight: torch.Tensor, step: KroneckerStep, einsum: bool = False) -> torch.Tensor:
    flat = torch.flatten(x.contiguous(), start_dim=x.dim() - len(step.axes))
    y = einsum_along(flat, weight, -1) if einsum else F.linear(flat, _cast_like(weight, x))
    # reshape, not unflatten: the TorchScript exporter translates aten::unflatten only from opset 13;
    # y.shape[:-1] is not made a tuple, since a Proxy under torch.fx cannot be iterated
    return y.reshape(y.shape[:-1] + tuple(step.out_sizes))


def _upsample(x: torch.Tensor, step: UpsampleStep, batched: bool) -> torch.Tensor:
    dims = len(step.sizes)
    if isinstance(x, torch.Tensor):  # eager: follow the input; under torch.fx, the traced layout
        batched = x.dim() == dims + 2
    sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(step.sizes)]
    if batched:
        return F.interpolate(x, size=sizes, mode="nearest")
    return F.interpolate(x.unsqueeze(0), size=sizes, mode="nearest").squeeze(0)
