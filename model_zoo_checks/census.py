"""Counting the adaptive pools a model actually calls, independently of fxpool's report.

The zoo's verdict "every pool found and converted" must not rest on fxpool's own account of what it
found. This module runs a model under a ``TorchFunctionMode`` and counts every call of the public
adaptive-pooling functions (which every ``nn.Adaptive*Pool`` module and ``nn.Upsample(mode="area")``
reach) by the name of the function. Nested calls are not counted twice: the mode is off while the
function it intercepted runs (interpolate's own adaptive_avg_pool2d is not seen). The table is
written out here on purpose rather than taken from :mod:`fxpool.calls`; so is the switch of
``torch.onnx.is_in_onnx_export`` that counts the export branch (``unittest.mock``, not fxpool's).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_COUNTED: dict[Callable[..., Any], str] = {
    F.adaptive_avg_pool1d: "adaptive_avg_pool1d",
    F.adaptive_avg_pool2d: "adaptive_avg_pool2d",
    F.adaptive_avg_pool3d: "adaptive_avg_pool3d",
    torch._C._nn.adaptive_avg_pool2d: "adaptive_avg_pool2d",
    torch._C._nn.adaptive_avg_pool3d: "adaptive_avg_pool3d",
    F.adaptive_max_pool1d: "adaptive_max_pool1d",
    F.adaptive_max_pool2d: "adaptive_max_pool2d",
    F.adaptive_max_pool3d: "adaptive_max_pool3d",
    F.adaptive_max_pool1d_with_indices: "adaptive_max_pool1d",
    F.adaptive_max_pool2d_with_indices: "adaptive_max_pool2d",
    F.adaptive_max_pool3d_with_indices: "adaptive_max_pool3d",
    torch.adaptive_max_pool1d: "adaptive_max_pool1d",
    torch._C._nn.adaptive_max_pool2d: "adaptive_max_pool2d",
    torch._C._nn.adaptive_max_pool3d: "adaptive_max_pool3d",
}


class _PoolCounter(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = _COUNTED.get(func)
        if name is None and func is F.interpolate and _mode(args, kwargs) == "area":
            name = "interpolate(area)"
        if name is not None:
            self.calls[name] += 1
        return func(*args, **kwargs)


def _mode(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return kwargs.get("mode", args[3] if len(args) > 3 else "nearest")


def pool_calls(model: Callable[..., Any], *args: Any, export_branch: bool = False, **kwargs: Any) -> dict[str, int]:
    """How many times ``model(*args, **kwargs)`` calls each adaptive pooling function (no grad).

    With ``export_branch``, ``torch.onnx.is_in_onnx_export()`` answers true while it runs, so code
    that branches on it takes the branch the ONNX exporters take.
    """
    counter = _PoolCounter()
    flag = mock.patch.object(torch.onnx, "is_in_onnx_export", lambda: True) if export_branch else contextlib.nullcontext()
    with torch.no_grad(), flag, counter:
        model(*args, **kwargs)
    return dict(counter.calls)
