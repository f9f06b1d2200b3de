"""Adaptive max pools that return their indices: PyTorch's values and argmax indices, in a portable form.

PyTorch's kernels (CPU, channels-last and CUDA alike) scan each window in row-major order and keep an entry greater
than the maximum so far, or NaN: the index is the **first** maximum on ties, the **last** NaN where the window holds
any, and the window's first position where every entry is -inf. :class:`WindowArgmaxPool` runs that kernel in eager;
tracers see plain ops that reproduce the rule over each window's gathered plane positions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import product
from typing import Any

import torch
from torch import nn

from .errors import PoolCallError
from .forms import keep_memory_format
from .replacements import native_pool_function
from .sizechecks import check_input, plain_eager, refuse_empty_torchscript_export
from .windows import window_bounds


def window_positions(in_sizes: Sequence[int], out_sizes: Sequence[int]) -> tuple[torch.Tensor, int]:
    """Every output's window as flat plane positions in row-major order, padded to the longest window by repeating
    its last position (never the first maximum): a ``(outputs * span,)`` int64 table, and ``span``."""
    per_axis = [window_bounds(i, o) for i, o in zip(in_sizes, out_sizes)]
    span = math.prod(max(end - start for start, end in bounds) for bounds in per_axis)
    strides = [math.prod(in_sizes[axis + 1 :]) for axis in range(len(in_sizes))]
    table: list[int] = []
    for window in product(*per_axis):  # outputs in row-major order
        positions = [sum(p * s for p, s in zip(point, strides)) for point in product(*(range(start, end) for start, end in window))]
        table += positions + [positions[-1]] * (span - len(positions))
    return torch.tensor(table, dtype=torch.int64), span


class WindowArgmaxPool(nn.Module):
    """An adaptive max pool returning ``(values, indices)`` as PyTorch does, for the input size it was built for."""

    runs_native_in_eager = True
    returns_indices = True
    positions: torch.Tensor
    window_starts: torch.Tensor
    ranks: torch.Tensor

    def __init__(
        self,
        in_sizes: tuple[int, ...],
        out_sizes: tuple[int, ...],
        location: str = "adaptive pool",
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.location = location
        self.in_sizes, self.out_sizes = tuple(in_sizes), tuple(out_sizes)
        self._build_tables(device)

    def _build_tables(self, device: torch.device | str | None) -> None:
        """The window tables, non-persistent (``state_dict`` keys stay the original's) and rebuilt exactly after any
        ``.to()`` (a dtype change would turn these integers to floats)."""
        positions, self.span = window_positions(self.in_sizes, self.out_sizes)
        self.register_buffer("positions", positions.to(device), persistent=False)
        self.register_buffer("window_starts", (torch.arange(math.prod(self.out_sizes)) * self.span).to(device), persistent=False)
        self.register_buffer("ranks", torch.arange(1, self.span + 1, dtype=torch.float32, device=device), persistent=False)

    @property
    def fxpool_native_reference(self) -> tuple[str, tuple[int | None, ...]]:
        """The family and output_size of the native pool this module stands for (for the self-check)."""
        return "max", self.out_sizes

    @property
    def output_size(self) -> tuple[int, ...]:
        return self.out_sizes

    def extra_repr(self) -> str:
        return f"max with indices: {self.in_sizes} -> {self.out_sizes}; window argmax over {self.span} entries"

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` gets the native pool this module stands for (same function, scriptable)."""
        return getattr(nn, f"AdaptiveMaxPool{len(self.out_sizes)}d")(self.out_sizes, return_indices=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = check_input(x, self.in_sizes, self.location)
        compiling = torch.compiler.is_compiling() and not torch.compiler.is_exporting()
        if compiling or (isinstance(x, torch.Tensor) and plain_eager()):
            return native_pool_function("max", len(self.out_sizes))(x, list(self.out_sizes), return_indices=True)
        if torch.jit.is_tracing() and torch.onnx.is_in_onnx_export():
            refuse_empty_torchscript_export(x, self.location)
        return self.traced_form(x)

    def traced_form(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What tracers see, run in eager (the self-check proves it on the example beside the native kernel)."""
        dims = len(self.in_sizes)
        if not isinstance(x, torch.Tensor):
            raise PoolCallError(f"{self.location}: return_indices=True pools cannot be traced by torch.fx symbolically")
        if x.dim() == dims + 1:
            values, indices = self.traced_form(x.unsqueeze(0))
            return values.squeeze(0), indices.squeeze(0)
        lead = tuple(x.shape[: x.dim() - dims])
        outputs = math.prod(self.out_sizes)
        flat = x.reshape(lead + (math.prod(self.in_sizes),))
        windows = flat.index_select(-1, self.positions).reshape(lead + (outputs, self.span))
        nan = windows.isnan()
        first_max = torch.where(nan, torch.full_like(windows, -math.inf), windows).argmax(-1)
        last_nan = (nan.to(self.ranks.dtype) * self.ranks).argmax(-1)
        winner = torch.where(nan.any(-1), last_nan, first_max)
        indices = self.positions[winner + self.window_starts]
        values = flat.gather(-1, indices)
        shape = lead + self.out_sizes
        return keep_memory_format(x, values.reshape(shape), dims), keep_memory_format(x, indices.reshape(shape), dims)

    def _apply(self, fn: Any, recurse: bool = True) -> WindowArgmaxPool:
        super()._apply(fn, recurse)
        self._build_tables(self.positions.device)
        return self
