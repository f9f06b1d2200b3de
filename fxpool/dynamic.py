"""Adaptive pooling that builds its windows from the size it is given (``dynamic=True``).

Per pooled axis of runtime length ``L`` and output ``o``, output ``i`` takes input ``j`` exactly
when ``(j + 1) * o > i * L`` and ``j * o < (i + 1) * L``: PyTorch's window
``[floor(i*L/o), ceil((i+1)*L/o))`` from integer arithmetic alone, without any division.

- :class:`DynamicAdaptiveAvgPool` turns that window mask into a 0/1 matrix and applies it by one
  matmul per axis to three stacked planes: the finite entries (NaN and infinities set to zero), and
  flags of what pushes a window's sum up (+inf, NaN) and down (-inf, NaN); a window's mean is its
  finite sum over its length, or the infinity or NaN its flags say, as in PyTorch's kernel. (A product
  of the input with an averaging matrix would make ``0 * inf`` a NaN in every window of the axis.) It
  exports as Shape, Range, Mul, Add, Less/Greater, And, Cast, ReduceSum, Div, Sub, Equal, IsNaN, Or,
  Where, Concat and MatMul.
- :class:`DynamicAdaptiveMaxPool` selects each window's entries with the mask (``Where``) and takes
  their maximum, one axis at a time, last axis first (so a tie's gradient lands where PyTorch's
  does, the first maximum in row-major order). It exports as Shape, Range, Mul, Add, Less/Greater,
  And, Where and ReduceMax (and IsNaN, ReduceMax of the window's NaN flags, Where: onnxruntime's ReduceMax
  skips NaN), with a Gather of each window's first entry in eager and under
  ``torch.fx``: masked entries take that value rather than ``-inf``, so a window of ``-inf`` sends
  its gradient to its first entry, as PyTorch does. The mask makes an ``o``-times larger
  intermediate per axis, the price of one graph for every size.

One graph serves every input size, with no Loop, If, GatherND or ScatterND.
"""

from __future__ import annotations

import torch
from torch import nn

from .replacements import (
    check_input,
    keep_memory_format,
    native_pool_function,
    native_pool_module,
    normalized_output_size,
    plain_eager,
)

torch.fx.wrap("check_input")  # a leaf here too, so converted models trace again with torch.fx


def runtime_window_mask(length: torch.Tensor | int, out_size: int, device: torch.device) -> torch.Tensor:
    """(out_size x length) booleans: input ``j`` lies in window ``i``; ops that trace with a symbolic length."""
    rows = torch.arange(out_size, device=device).unsqueeze(1)  # i
    cols = torch.arange(length, device=device).unsqueeze(0)  # type: ignore[arg-type]  # j; a SymInt under tracing
    return ((cols + 1) * out_size > rows * length) & (cols * out_size < (rows + 1) * length)


def runtime_window_starts(length: torch.Tensor | int, out_size: int, device: torch.device) -> torch.Tensor:
    """``floor(i * length / out_size)`` for every output ``i``, from a (possibly symbolic) length."""
    return torch.div(torch.arange(out_size, device=device) * length, out_size, rounding_mode="floor")


class _DynamicPool(nn.Module):
    """What both dynamic pools share: their output size, their name in errors, their native reference."""

    family = ""

    def __init__(self, out_sizes: tuple[int | None, ...], location: str = "adaptive pool") -> None:
        super().__init__()
        self.out_sizes = tuple(out_sizes)
        self.location = location

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

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` gets the native pool this module stands for (same function, scriptable)."""
        return native_pool_module(self.family, self.out_sizes)

    def extra_repr(self) -> str:
        return f"output_size={self.out_sizes}, windows from the runtime size"

    def _native(self, x: torch.Tensor) -> torch.Tensor:
        """PyTorch's own adaptive pool this module stands for."""
        dims = len(self.out_sizes)
        sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(self.out_sizes)]
        return native_pool_function(self.family, dims)(x, sizes)


def runs_natively(x: torch.Tensor) -> bool:
    """Eager and torch.compile run PyTorch's own kernel (exact, native speed by definition); exporters,
    ``torch.jit.trace``, ``torch.fx`` and :func:`~fxpool.replacements.traced_forms` get the graph form."""
    if not isinstance(x, torch.Tensor):
        return False
    return plain_eager() or (torch.compiler.is_compiling() and not torch.compiler.is_exporting())


class DynamicAdaptiveAvgPool(_DynamicPool):
    """Exact adaptive average pooling at any input size, with export-friendly ops."""

    family = "avg"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = source = check_input(x, (None,) * len(self.out_sizes), self.location)
        if runs_natively(x):
            return self._native(x)
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))  # half and bfloat16 summed in float32, rounded once
        dims = len(self.out_sizes)
        # Three planes pooled alike (sums are separable): the finite entries, each NaN and infinity set
        # to zero, and two 0/1 planes that flag what pushes a window's sum up (+inf, NaN) and down
        # (-inf, NaN). Averaging the input itself would make 0 * inf a NaN in every window of an axis.
        isnan = torch.isnan(x)
        planes = torch.stack(
            [
                torch.where(x - x == 0, x, 0.0),  # x - x is NaN at NaN and at both infinities
                ((x == float("inf")) | isnan).to(x.dtype),
                ((x == float("-inf")) | isnan).to(x.dtype),
            ]
        )
        for axis in reversed(range(dims)):  # the last axis first: no transpose while the planes are largest
            out_size = self.out_sizes[axis]
            if out_size is None:
                continue
            last = planes.dim() - 1
            dim = last + 1 + axis - dims  # positive: TorchScript's export of movedim mistranslates negative axes
            member = runtime_window_mask(planes.shape[dim], out_size, x.device).transpose(0, 1).to(x.dtype)  # (L, o)
            counts = member.sum(0)
            pooled = planes.movedim(dim, last) @ member  # window sums of the finite part, window counts of the flags
            planes = torch.cat([pooled[:1] / counts, pooled[1:]]).movedim(last, dim)
        means, up, down = planes.unbind(0)
        infinite = torch.where(down > 0, float("nan"), float("inf"))
        x = torch.where(up > 0, infinite, torch.where(down > 0, float("-inf"), means))
        return keep_memory_format(source, x.to(dtype), dims)


class DynamicAdaptiveMaxPool(_DynamicPool):
    """Exact adaptive max pooling at any input size, with export-friendly ops."""

    family = "max"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = source = check_input(x, (None,) * len(self.out_sizes), self.location)
        if runs_natively(x):
            return self._native(x)
        dims = len(self.out_sizes)
        exporting = torch.onnx.is_in_onnx_export()
        for axis in reversed(range(dims)):  # last axis first: PyTorch's row-major choice among ties
            out_size = self.out_sizes[axis]
            if out_size is None:
                continue
            last = x.dim() - 1
            dim = last + 1 + axis - dims  # positive: TorchScript's export of movedim mistranslates negative axes
            mask = runtime_window_mask(x.shape[dim], out_size, x.device)  # (o, L)
            rows = x.movedim(dim, last).unsqueeze(-2)  # (..., 1, L)
            if exporting:  # values only: -inf outside the window, one ReduceMax
                maxima = torch.where(mask, rows, float("-inf")).amax(-1)
                # onnxruntime's ReduceMax skips NaN, PyTorch's pools return it: a window holding one is NaN
                holds_nan = (mask & torch.isnan(rows)).any(-1)
                x = torch.where(holds_nan, float("nan"), maxima).movedim(last, dim)
                continue
            first = torch.index_select(x, dim, runtime_window_starts(x.shape[dim], out_size, x.device))
            outside = first.movedim(dim, last).unsqueeze(-1)  # (..., o, 1): each window's first entry
            x = torch.where(mask, rows, outside).max(-1).values.movedim(last, dim)
        return keep_memory_format(source, x, dims)
