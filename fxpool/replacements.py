""":class:`ExactAdaptivePool`: one adaptive pool computed exactly, for the input size it was planned for.

Tracers see the steps of its :class:`~fxpool.steps.PoolPlan` as the plain ops of :mod:`fxpool.forms`; eager runs
one-step plans in one call and uneven windows by PyTorch's kernel; ``torch.compile`` (no exporter) gets PyTorch's
pool. Window indices and scales are non-persistent buffers (``state_dict`` keys stay the original's), rebuilt exactly
after any ``.to()``, so ``.double()`` stays exact to float64."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import PoolCallError
from .forms import AVG_POOLS, MAX_POOLS, plan_constants, run_onnx_steps, run_steps, window_scales
from .planning import choose_plan
from .sizechecks import check_input, in_onnx_export, plain_eager, pool_at, traced_guard
from .steps import PoolPlan, PoolStep, ReduceStep, WindowScaleStep, axis_names

torch.fx.wrap("check_input")  # a leaf here too, so converted models trace again with torch.fx

# Axis kinds whose windows eager leaves to PyTorch's own kernel (exact, native speed by definition).
_WINDOWED_KINDS = ("gather", "sliding", "slices")
# Prefixes of the non-persistent buffers a plan's constants live in (rebuilt exactly after any conversion)
_CONSTANT_PREFIXES = ("weight_", "indices_", "counts_")


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
        self.expected_sizes = tuple(plan.in_sizes[a] if a in plan.guarded_axes else None for a in range(plan.spatial_dims))
        self._native_in_eager = any(a.kind in _WINDOWED_KINDS for a in plan.axes)
        for name in [name for name, _ in self.named_buffers(recurse=False) if name.startswith(_CONSTANT_PREFIXES)]:
            delattr(self, name)
        self._build_constants(dtype, device)
        # Every spatial size fixed: the eager fast path compares the input's with one tuple.
        self._fixed_sizes = self.expected_sizes if None not in self.expected_sizes else None
        self._fast = _fast_eager_kind(plan, self._native_in_eager, self._fixed_sizes is not None)

    @property
    def output_size(self) -> tuple[int | None, ...]:
        """The output size this pool computes, as ``nn.AdaptiveAvgPool2d.output_size`` holds it; assigning another
        one (as a forward may do before each call) plans the pool again at the same input sizes."""
        return self.fxpool_native_reference[1]

    @output_size.setter
    def output_size(self, value: int | None | Sequence[int | None]) -> None:
        plan = replanned(self.plan, value, self.location)
        if plan is not self.plan:
            self._set_plan(plan, *self._constants_dtype_device())

    def _constants_dtype_device(self) -> tuple[torch.dtype, torch.device | None]:
        """The window scales' dtype (float32, or float64 for float64 models) and the constants' device."""
        constants = [(name, b) for name, b in self.named_buffers(recurse=False) if name.startswith(_CONSTANT_PREFIXES)]
        scales = [b for name, b in constants if name.startswith("weight_")]
        dtype = torch.float64 if scales and scales[0].dtype == torch.float64 else torch.float32
        return dtype, constants[0][1].device if constants else None

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` gets the native pool this module stands for (same function, scriptable)."""
        return native_pool_module(*self.fxpool_native_reference)

    def _build_constants(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        for name, tensor in plan_constants(self.plan, dtype, device).items():
            self.register_buffer(name, tensor, persistent=False)

    def _apply(self, fn, recurse: bool = True):
        # A dtype change would round the window scales, to_empty() leave the constants uninitialised: rebuild them.
        super()._apply(fn, recurse)
        dtype, device = self._constants_dtype_device()
        if device is not None:
            self._build_constants(dtype, device)
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
            return run_fast(self.plan, x, fast)
        x = check_input(x, self.expected_sizes, self.location)
        if torch.compiler.is_compiling() and not torch.compiler.is_exporting():
            # torch.compile is not an exporter: inductor lowers PyTorch's own pool exactly, and 1.4-8x faster.
            return native_pool(x, *self.fxpool_native_reference)
        eager = isinstance(x, torch.Tensor) and plain_eager()  # not a Proxy, nothing traces
        # Under autocast the native pool's policy decides the output dtype (3d in float32 on CPU): PyTorch's kernel
        if eager and (self.runs_native_in_eager or torch.is_autocast_enabled(x.device.type)):
            return native_pool(x, *self.fxpool_native_reference)
        if eager:
            return run_steps(self, x)
        x = traced_guard(x, self.expected_sizes, self.location)  # what a tracer records: the size guard, then the steps
        return self._batched(x, onnx=bool(self.plan.onnx_steps) and in_onnx_export())

    def _batched(self, x: torch.Tensor, onnx: bool) -> torch.Tensor:
        """The plan's steps (ONNX export's own where ``onnx``); unbatched input runs as a batch of one, since
        ONNX pools and the TorchScript exporter's symbolics read the first two axes as batch and channels."""
        if isinstance(x, torch.Tensor) and x.dim() == self.plan.spatial_dims + 1:
            return self._batched(x.unsqueeze(0), onnx).squeeze(0)
        return run_onnx_steps(self, x) if onnx else run_steps(self, x)

    def traced_form(self, x: torch.Tensor) -> torch.Tensor:
        """What exporters, ``torch.jit.trace`` and ``torch.fx`` see, run in eager (the self-check proves it too)."""
        return self._batched(check_input(x, self.expected_sizes, self.location), onnx=False)

    def onnx_form(self, x: torch.Tensor) -> torch.Tensor:
        """What ONNX export sees (the plan's ``onnx_steps`` where it has them), run in eager."""
        return self._batched(check_input(x, self.expected_sizes, self.location), onnx=bool(self.plan.onnx_steps))

    @property
    def runs_native_in_eager(self) -> bool:
        """Uneven windows run PyTorch's own kernel in eager (every exact form stayed 1.7-4x slower), tracers the forms."""
        return self._native_in_eager

    def _weight_for(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The step's window scales in ``x``'s dtype; float64 input gets exact float64 scales."""
        weight = getattr(self, f"weight_{index}")
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and weight.dtype != torch.float64:
            step = self.plan.steps[index]
            assert isinstance(step, WindowScaleStep)
            return window_scales(step.in_size, step.out_size, step.span).to(dtype=torch.float64, device=x.device)
        return weight


def normalized_output_size(value: int | None | Sequence[int | None], dims: int, location: str) -> tuple[int | None, ...]:
    """An ``output_size`` as a tuple of ``dims`` entries (``None``: keep the input's size)."""
    sizes = (value,) * dims if value is None or isinstance(value, int) else tuple(value)
    if len(sizes) != dims or any(s is not None and (not isinstance(s, int) or s < 1) for s in sizes):
        raise PoolCallError(f"{pool_at(location)}: output_size {value!r} is not {dims} positive integers or None")
    return sizes


@lru_cache(maxsize=256)
def planned(family: str, in_sizes: tuple[int, ...], out_sizes: tuple[int, ...], follows: tuple[bool, ...]) -> PoolPlan:
    """``choose_plan``, remembered: a forward that sets its pool's output size on every call plans once per size."""
    return choose_plan(family, in_sizes, out_sizes, follows)  # type: ignore[arg-type]


def replanned(plan: PoolPlan, value: int | None | Sequence[int | None], location: str) -> PoolPlan:
    """The plan at the same input sizes for another ``output_size`` (``plan`` itself where it is the same)."""
    requested = normalized_output_size(value, plan.spatial_dims, location)
    if requested == tuple(None if a.follows_input else a.out_size for a in plan.axes):
        return plan
    if plan.scaled_output:
        raise PoolCallError(
            f"{pool_at(location)}: its output size follows interpolate's scale_factor; it cannot be set to "
            f"{requested}. Convert the model again with the new scale."
        )
    follows = tuple(size is None for size in requested)
    out_sizes = tuple(i if size is None else size for i, size in zip(plan.in_sizes, requested))
    return planned(plan.family, plan.in_sizes, out_sizes, follows)


def native_pool(x: torch.Tensor, family: str, out_sizes: tuple[int | None, ...]) -> torch.Tensor:
    """PyTorch's own adaptive pool of this family and output size (``None``: the input's size) on ``x``."""
    dims = len(out_sizes)
    sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(out_sizes)]
    return native_pool_function(family, dims)(x, sizes)


def run_fast(plan: PoolPlan, x: torch.Tensor, kind: str) -> torch.Tensor:
    """The one-call eager form of a one-step plan (see :func:`_fast_eager_kind`)."""
    dims, step = plan.spatial_dims, plan.steps[0]
    if kind == "native":
        return native_pool_function(plan.family, dims)(x, list(plan.out_sizes))
    if kind == "mean":
        return x.mean([a - dims for a in step.axes], keepdim=True)  # type: ignore[union-attr]
    assert kind == "pool" and isinstance(step, PoolStep)
    return (AVG_POOLS if step.family == "avg" else MAX_POOLS)[dims](x, step.kernel, step.stride)


def native_pool_function(family: str, dims: int) -> Any:
    """PyTorch's functional adaptive pool of this family and number of spatial axes."""
    return getattr(F, f"adaptive_{family}_pool{dims}d")


def native_pool_module(family: str, output_size: tuple[int | None, ...]) -> nn.Module:
    """PyTorch's adaptive pool module of this family and output size."""
    return getattr(nn, f"Adaptive{family.capitalize()}Pool{len(output_size)}d")(output_size)


def _fast_eager_kind(plan: PoolPlan, native_in_eager: bool, sizes_fixed: bool) -> str:
    """Which one-call eager form a plan has ("" for none): the common one-step plans, run on a contiguous float32
    tensor of the traced sizes without the general path's checks and loop over steps (5-25 us a call)."""
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
