"""The process-wide state fxpool has to touch, behind one lock, and always put back.

Converting reads and writes state that belongs to the whole process: the global random-number
generators (forked around the example runs), torch.fx's patch of ``nn.Module.__call__`` while it
traces, ``torch.onnx.is_in_onnx_export`` while it traces, and the TorchScript exporter's symbolic
registry. Two conversions interleaving on these would restore each other's saved values.

- :data:`LOCK` serialises every such section (re-entrant: ``export`` converts inside it);
- :func:`refusing_export_branches` makes ``torch.onnx.is_in_onnx_export()`` raise for the calling
  thread only, so a trace cannot silently keep one branch, while other threads see the real one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

LOCK = threading.RLock()

_refusing = threading.local()


class ExportBranchError(Exception):
    """Raised inside a trace by code that branches on ``torch.onnx.is_in_onnx_export()``."""


def _make_stand_in(original: Callable[[], bool]) -> Callable[[], bool]:
    def is_in_onnx_export() -> bool:
        if getattr(_refusing, "depth", 0):
            raise ExportBranchError("the code branches on torch.onnx.is_in_onnx_export(); a trace would keep only the eager branch")
        return original()

    is_in_onnx_export.fxpool_original = original  # type: ignore[attr-defined]
    return is_in_onnx_export


@contextmanager
def refusing_export_branches() -> Iterator[None]:
    """While inside, ``torch.onnx.is_in_onnx_export()`` raises :class:`ExportBranchError` in this thread."""
    with LOCK:
        original = torch.onnx.is_in_onnx_export
        stand_in = _make_stand_in(original)
        torch.onnx.is_in_onnx_export = stand_in
        _refusing.depth = getattr(_refusing, "depth", 0) + 1
        try:
            yield
        finally:
            _refusing.depth -= 1
            torch.onnx.is_in_onnx_export = original


def is_stand_in(value: Any) -> bool:
    """True for fxpool's stand-in of ``is_in_onnx_export`` (tests check none is left behind)."""
    return hasattr(value, "fxpool_original")
