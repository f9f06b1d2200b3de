"""The modules that stand in for adaptive pools: exact, shape-specialised, export-friendly.

:class:`ExactAdaptivePool` runs the steps of a :class:`~fxpool.planning.PoolPlan` with plain ops
(``avg_pool``/``max_pool``, ``mean``/``max``, ``matmul``, constant ``index_select``, nearest
``interpolate``). Averaging matrices and window indices are non-persistent buffers: they follow
``.to(device)``, are left out of ``state_dict`` (so the converted model loads the original's
weights), and are rebuilt exactly after a dtype change, so ``.double()`` stays exact to float64.

A replacement whose plan depends on the traced spatial size checks it on every call and raises
:class:`~fxpool.errors.SpatialSizeError` otherwise. The check is skipped while TorchScript traces
(the exported graph keeps static spatial sizes, which is its own guard) and is an fx leaf
function, so converted models can be traced again.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .errors import SpatialSizeError
from .planning import (
    KroneckerStep,
    MatmulStep,
    PoolPlan,
    PoolStep,
    ReduceStep,
    UpsampleStep,
    WindowGatherStep,
    axis_names,
)
from .windows import window_bounds

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_AVG_POOLS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_MAX_POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def averaging_matrix(in_size: int, out_size: int, dtype: torch.dtype = torch.float64,
                     device: torch.device | str | None = None) -> torch.Tensor:
    """The (out_size x in_size) matrix whose row i averages window i, built in float64 then cast."""
    matrix = torch.zeros(out_size, in_size, dtype=torch.float64)
    for i, (start, end) in enumerate(window_bounds(in_size, out_size)):
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix.to(dtype=dtype, device=device)


def kronecker_matrix(in_sizes: Sequence[int], out_sizes: Sequence[int], dtype: torch.dtype = torch.float64,
                     device: torch.device | str | None = None) -> torch.Tensor:
    """The (prod(out) x prod(in)) averaging matrix over row-major flattened axes."""
    matrix = torch.ones(1, 1, dtype=torch.float64)
    for i, o in zip(in_sizes, out_sizes):
        matrix = torch.kron(matrix, averaging_matrix(i, o))
    return matrix.to(dtype=dtype, device=device)


def window_gather_indices(in_size: int, out_size: int, span: int) -> torch.Tensor:
    """Each window's positions in order, padded to ``span`` by repeating its last position.

    A repeat comes after the position it copies, so a max over the span still finds the first (and,
    for NaN, the last) maximum where PyTorch does, and its gradient lands on the same input.
    """
    positions = []
    for start, end in window_bounds(in_size, out_size):
        positions += list(range(start, end)) + [end - 1] * (span - (end - start))
    return torch.tensor(positions, dtype=torch.int64)


@torch.fx.wrap
def check_spatial_size(x: torch.Tensor, expected: tuple[int | None, ...], where: str) -> torch.Tensor:
    """Return ``x`` if its trailing spatial sizes match ``expected`` (``None``: any), else raise."""
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return x
    seen = tuple(x.shape[len(x.shape) - len(expected):])
    if len(x.shape) < len(expected) or any(e is not None and e != s for e, s in zip(expected, seen)):
        traced = tuple("*" if e is None else e for e in expected)
        raise SpatialSizeError(
            f"{where}: this replacement was specialised for spatial size {traced} but got input of "
            f"shape {tuple(x.shape)} (spatial {seen}). Convert again with an example input of this "
            f"size (fxpool.convert(model, example)), or convert with dynamic=True for one model "
            f"that serves every size."
        )
    return x


class ExactAdaptivePool(nn.Module):
    """Computes one adaptive average or max pool exactly, for the input size it was planned for."""

    def __init__(self, plan: PoolPlan, where: str = "adaptive pool", weight_dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, batched: bool = True) -> None:
        super().__init__()
        self.plan = plan
        self.where = where
        self.batched = batched  # the traced input had a batch axis
        expected = [None] * plan.spatial_dims
        for axis in plan.guarded_axes:
            expected[axis] = plan.in_sizes[axis]
        self.expected_sizes: tuple[int | None, ...] = tuple(expected)
        for index, step in enumerate(plan.steps):
            if isinstance(step, WindowGatherStep):
                indices = window_gather_indices(step.in_size, step.out_size, step.span)
                self.register_buffer(f"indices_{index}", indices.to(device), persistent=False)
        self._build_weights(weight_dtype, device)

    def _build_weights(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        for index, step in enumerate(self.plan.steps):
            if isinstance(step, MatmulStep):
                weight = averaging_matrix(step.in_size, step.out_size, dtype, device)
            elif isinstance(step, KroneckerStep):
                weight = kronecker_matrix(step.in_sizes, step.out_sizes, dtype, device)
            else:
                continue
            self.register_buffer(f"weight_{index}", weight, persistent=False)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[override]
        # A dtype change would round the averaging weights; rebuild them exactly instead.
        super()._apply(fn, recurse)
        weights = [b for name, b in self.named_buffers(recurse=False) if name.startswith("weight_")]
        if weights:
            dtype = torch.float64 if weights[0].dtype == torch.float64 else torch.float32
            self._build_weights(dtype, weights[0].device)
        return self

    def extra_repr(self) -> str:
        names = axis_names(self.plan.spatial_dims)
        sizes = ", ".join(f"{n}={i}->{o}" for n, i, o in zip(names, self.plan.in_sizes, self.plan.out_sizes))
        return f"{self.plan.family}: {sizes}; {self.plan.describe()}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plan.guarded_axes:
            x = check_spatial_size(x, self.expected_sizes, self.where)
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
            if isinstance(step, PoolStep):
                pool = _AVG_POOLS[dims] if step.family == "avg" else _MAX_POOLS[dims]
                x = pool(x, step.kernel, step.stride)
            elif isinstance(step, ReduceStep):
                x = _reduce(x, step, dims)
            elif isinstance(step, MatmulStep):
                x = matmul_along(x, getattr(self, f"weight_{index}"), step.axis - dims)
            elif isinstance(step, KroneckerStep):
                x = _kronecker(x, getattr(self, f"weight_{index}"), step)
            elif isinstance(step, WindowGatherStep):
                x = torch.index_select(x, step.axis - dims, getattr(self, f"indices_{index}"))
            else:
                x = _upsample(x, step, self.batched)
        return x.to(dtype) if upcast else x


def _reduce(x: torch.Tensor, step: ReduceStep, dims: int) -> torch.Tensor:
    axes = [a - dims for a in step.axes]
    if step.family == "avg":
        return x.mean(dim=axes, keepdim=True)
    # max(dim) sends the gradient to the first maximum; last axis first keeps PyTorch's row-major order.
    for axis in reversed(axes):
        x = torch.max(x, dim=axis, keepdim=True).values
    return x


def _cast_like(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # Under torch.fx both are Proxies, so the cast is recorded rather than decided.
    if isinstance(x, torch.fx.Proxy) or weight.dtype != x.dtype:
        return weight.to(x.dtype)
    return weight


def matmul_along(x: torch.Tensor, weight: torch.Tensor, dim: int) -> torch.Tensor:
    """Average along ``dim`` (negative) by its (out x in) matrix.

    In eager the axis is moved last and made contiguous, so that the product, forward and
    backward, is one large GEMM over all leading axes. Left as a strided view, matmul falls back
    to a batch of tiny GEMMs, and its backward to a per-matrix loop when the incoming gradient is
    an expanded (stride 0) tensor, as after ``.sum()`` — measured 3-6x slower than native pooling.
    Under ONNX export the axis -2 product stays one broadcast MatMul instead, which onnxruntime
    runs 25-35% faster than Transpose, MatMul, Transpose (33->6 and 64->6, C=512).
    """
    weight = _cast_like(weight, x)
    if dim == -1:
        return F.linear(x.contiguous(), weight)
    if dim == -2 and torch.onnx.is_in_onnx_export():
        return torch.matmul(weight, x)
    return F.linear(x.transpose(dim, -1).contiguous(), weight).transpose(dim, -1)


def _kronecker(x: torch.Tensor, weight: torch.Tensor, step: KroneckerStep) -> torch.Tensor:
    flat = torch.flatten(x.contiguous(), start_dim=x.dim() - len(step.axes))
    y = F.linear(flat, _cast_like(weight, x))
    return torch.unflatten(y, y.dim() - 1, step.out_sizes)


def _upsample(x: torch.Tensor, step: UpsampleStep, batched: bool) -> torch.Tensor:
    if batched:
        return F.interpolate(x, size=step.sizes, mode="nearest")
    return F.interpolate(x.unsqueeze(0), size=step.sizes, mode="nearest").squeeze(0)
