"""Test inputs: random ones with NaN, +inf and -inf among their values, and integers that show a misplaced window."""

from __future__ import annotations

import torch


def with_non_finite(shape: tuple[int, ...], seed: int, every: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random normal values, about one entry in ``every`` NaN, one in ``every`` +inf and one in ``every`` -inf."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=dtype, generator=generator)
    kind = torch.randint(0, every, shape, generator=generator)
    x[kind == 0], x[kind == 1], x[kind == 2] = float("nan"), float("inf"), float("-inf")
    return x


def integers_showing_shifted_windows(family: str, length: int) -> torch.Tensor:
    """``(1, 1, length)`` integers: for max a ramp (a window's maximum is its last entry), for averages random
    ones below 16, whose window sums are exact in float32, so a mean is off by a shifted entry (at least 1 / its
    count) or by one rounding."""
    if family == "max":
        return torch.arange(length, dtype=torch.float32).reshape(1, 1, length)
    return torch.randint(0, 16, (1, 1, length), generator=torch.Generator().manual_seed(length)).float()


def with_masked_windows(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """``(N, 4, ...)`` random values with NaN and ±inf (:func:`with_non_finite`), but channel 0 all -inf (every
    window -inf alone, as a mask of -inf makes), channel 1 all the lowest float (a ``torch.finfo(...).min`` mask),
    channel 2 both in turn along the last axis, channel 3 -inf over the first half of the last axis."""
    x = with_non_finite(shape, seed=seed, every=9)
    lowest = torch.finfo(x.dtype).min
    x[:, 0], x[:, 1] = float("-inf"), lowest
    x[:, 2, ..., ::2], x[:, 2, ..., 1::2] = float("-inf"), lowest
    x[:, 3, ..., : shape[-1] // 2] = float("-inf")
    return x
