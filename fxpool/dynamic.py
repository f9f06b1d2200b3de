"""Adaptive average pooling that builds its windows from the size it is given (``dynamic=True``).

:class:`DynamicAdaptiveAvgPool` computes, per pooled axis of runtime length ``L`` and output ``o``,
the averaging matrix from integer arithmetic alone — output ``i`` takes input ``j`` exactly when
``(j + 1) * o > i * L`` and ``j * o < (i + 1) * L``, which is PyTorch's window
``[floor(i*L/o), ceil((i+1)*L/o))`` without any division — then applies it by matmul. It exports
to ONNX as Shape, Range, Mul, Add, Less/Greater, And, Cast, ReduceSum, Div and MatMul, so one
graph serves every input size.
"""

from __future__ import annotations

import torch
from torch import nn

from .replacements import check_input, keep_memory_format, matmul_along


def runtime_averaging_matrix(length: torch.Tensor | int, out_size: int, dtype: torch.dtype,
                             device: torch.device) -> torch.Tensor:
    """The (out_size x length) averaging matrix, built from ops that trace with a symbolic length."""
    rows = torch.arange(out_size, device=device).unsqueeze(1)  # i
    cols = torch.arange(length, device=device).unsqueeze(0)  # type: ignore[arg-type]  # j; a SymInt under tracing
    member = ((cols + 1) * out_size > rows * length) & (cols * out_size < (rows + 1) * length)
    weights = member.to(dtype)
    return weights / weights.sum(dim=1, keepdim=True)


class DynamicAdaptiveAvgPool(nn.Module):
    """Exact adaptive average pooling at any input size, with export-friendly ops."""

    def __init__(self, out_sizes: tuple[int | None, ...], where: str = "adaptive pool") -> None:
        super().__init__()
        self.out_sizes = tuple(out_sizes)
        self.where = where

    @property
    def fxpool_native_reference(self) -> tuple[str, tuple[int | None, ...]]:
        """The family and output_size of the native pool this module stands for (for the self-check)."""
        return "avg", self.out_sizes

    def extra_repr(self) -> str:
        return f"output_size={self.out_sizes}, windows from the runtime size"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = source = check_input(x, (None,) * len(self.out_sizes), self.where)
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))
        dims = len(self.out_sizes)
        for axis, out_size in enumerate(self.out_sizes):
            if out_size is None:
                continue
            dim = axis - dims
            weight = runtime_averaging_matrix(x.shape[dim], out_size, x.dtype, x.device)
            x = matmul_along(x, weight, dim)
        return keep_memory_format(source, x.to(dtype), dims)
