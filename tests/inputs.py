"""Random test inputs with NaN, +inf and -inf among their values."""

from __future__ import annotations

import torch


def with_non_finite(shape: tuple[int, ...], seed: int, every: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random normal values, about one entry in ``every`` NaN, one in ``every`` +inf and one in ``every`` -inf."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=dtype, generator=generator)
    kind = torch.randint(0, every, shape, generator=generator)
    x[kind == 0], x[kind == 1], x[kind == 2] = float("nan"), float("inf"), float("-inf")
    return x
