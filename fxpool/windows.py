"""Window arithmetic of adaptive pooling along one axis, as pure functions of sizes.

PyTorch pools output index ``i`` of an axis of length ``in_size`` resized to ``out_size`` over the
half-open window ``[floor(i * in_size / out_size), ceil((i + 1) * in_size / out_size))``.

>>> window_bounds(7, 3)
((0, 3), (2, 5), (4, 7))
>>> uniform_stride(7, 3)
(3, 2)
>>> uniform_stride(10, 7) is None
True
"""

from __future__ import annotations

from functools import lru_cache


def _check_sizes(in_size: int, out_size: int) -> None:
    if in_size < 1 or out_size < 1:
        raise ValueError(f"window sizes need in_size >= 1 and out_size >= 1, got {in_size} -> {out_size}")


@lru_cache(maxsize=4096)
def window_bounds(in_size: int, out_size: int) -> tuple[tuple[int, int], ...]:
    """All windows ``(start, end)`` of the axis, in output order (the floor and ceil above, in integers)."""
    _check_sizes(in_size, out_size)
    return tuple(((i * in_size) // out_size, -((-(i + 1) * in_size) // out_size)) for i in range(out_size))


def window_lengths(in_size: int, out_size: int) -> tuple[int, ...]:
    """The distinct window lengths, ascending. Adaptive windows never take more than two."""
    return tuple(sorted({end - start for start, end in window_bounds(in_size, out_size)}))


def uniform_stride(in_size: int, out_size: int) -> tuple[int, int] | None:
    """``(kernel, stride)`` such that a padding-free pooling reproduces every window, or ``None``; a single
    window (``out_size == 1``) is the kernel ``in_size`` at stride ``in_size``."""
    windows = window_bounds(in_size, out_size)
    kernel = windows[0][1] - windows[0][0]
    if out_size == 1:
        return (kernel, kernel)
    stride = windows[1][0] - windows[0][0]
    if stride < 1:
        return None
    for i, (start, end) in enumerate(windows):
        if start != i * stride or end - start != kernel:
            return None
    return (kernel, stride)


def upsample_factor(in_size: int, out_size: int) -> int | None:
    """The integer ``r`` with ``out_size == r * in_size`` (r >= 2), where every window is one input."""
    _check_sizes(in_size, out_size)
    if out_size > in_size and out_size % in_size == 0:
        return out_size // in_size
    return None


def reshapes_into_blocks(in_size: int, out_size: int) -> bool:
    """Whether every window is a block of a reshape to ``(out_size, in_size // out_size)`` of two or more entries:
    ``in_size`` a multiple of ``out_size``, at least twice it."""
    return in_size % out_size == 0 and in_size >= 2 * out_size
