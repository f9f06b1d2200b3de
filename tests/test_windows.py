"""Window arithmetic against PyTorch itself, exhaustively over small sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxpool.windows import reshapes_into_blocks, uniform_stride, upsample_factor, window_bounds, window_lengths

SIZES = [(i, o) for i in range(1, 17) for o in range(1, 21)]


def _pytorch_windows(in_size: int, out_size: int) -> list[tuple[int, int]]:
    """Windows read off PyTorch: pooling the identity matrix shows which inputs feed each output."""
    eye = torch.eye(in_size, dtype=torch.float64).unsqueeze(0)  # (1, L, L): channel j is e_j
    pooled = F.adaptive_avg_pool1d(eye, out_size)[0]  # (L, out)
    windows = []
    for i in range(out_size):
        members = torch.nonzero(pooled[:, i]).flatten().tolist()
        windows.append((members[0], members[-1] + 1))
    return windows


@pytest.mark.parametrize("in_size,out_size", SIZES)
def test_window_bounds_match_pytorch(in_size: int, out_size: int) -> None:
    assert list(window_bounds(in_size, out_size)) == _pytorch_windows(in_size, out_size)


def _pooling_windows(in_size: int, kernel: int, stride: int) -> tuple[tuple[int, int], ...]:
    count = (in_size - kernel) // stride + 1
    return tuple((i * stride, i * stride + kernel) for i in range(count))


@pytest.mark.parametrize("in_size,out_size", SIZES)
def test_uniform_stride_exactly_when_some_pooling_matches(in_size: int, out_size: int) -> None:
    windows = window_bounds(in_size, out_size)
    matching = [(k, s) for k in range(1, in_size + 1) for s in range(1, in_size + 1) if _pooling_windows(in_size, k, s) == windows]
    uniform = uniform_stride(in_size, out_size)
    if uniform is None:
        assert matching == []
    else:
        assert uniform in matching


def test_named_uniform_cases() -> None:
    assert uniform_stride(7, 3) == (3, 2)
    assert uniform_stride(5, 2) == (3, 2)
    assert uniform_stride(8, 7) == (2, 1)
    assert uniform_stride(14, 7) == (2, 2)
    assert uniform_stride(10, 7) is None
    assert uniform_stride(4, 8) is None  # upsampling repeats starts: stride 0


@pytest.mark.parametrize("in_size,out_size", SIZES)
def test_window_lengths_are_at_most_two_and_adjacent(in_size: int, out_size: int) -> None:
    lengths = window_lengths(in_size, out_size)
    assert 1 <= len(lengths) <= 2
    assert lengths[-1] - lengths[0] <= 1  # so the max family's gather pads a short window by one repeat


def test_upsample_factor() -> None:
    assert upsample_factor(4, 16) == 4
    assert upsample_factor(5, 20) == 4
    assert upsample_factor(4, 6) is None
    assert upsample_factor(4, 4) is None
    with pytest.raises(ValueError):
        upsample_factor(0, 3)


def test_reshapes_into_blocks_exactly_where_every_window_is_a_block_of_two_or_more() -> None:
    for in_size in range(1, 60):
        for out_size in range(1, 20):
            blocks = all(end - start == in_size // out_size >= 2 for start, end in window_bounds(in_size, out_size))
            assert reshapes_into_blocks(in_size, out_size) == blocks, (in_size, out_size)
