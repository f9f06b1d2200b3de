"""The process-wide state fxpool has to touch, behind one lock, and always put back.

Converting reads and writes state that belongs to the whole process: the global random-number
generators (forked around the example runs), torch.fx's patch of ``nn.Module.__call__`` while it
traces, ``torch.onnx.is_in_onnx_export`` while it records and traces, and the TorchScript exporter's
symbolic registry. Two conversions interleaving on these would restore each other's saved values.

- :data:`LOCK` serialises every such section (re-entrant: ``export`` converts inside it);
- :func:`export_flag` decides what ``torch.onnx.is_in_onnx_export()`` answers in the calling thread
  only (``True``, ``False``, or raise :class:`ExportBranchError`), and counts how often user code
  asked, so fxpool can tell a model that branches on it and follow both branches; other threads
  see the real answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

LOCK = threading.RLock()

_answers = threading.local()  # .stack: this thread's (answer, reads) sections, innermost last


class ExportBranchError(Exception):
    """Raised by code that branches on ``torch.onnx.is_in_onnx_export()`` where no branch may be taken."""


@dataclass
class FlagReads:
    """How often the code asked ``torch.onnx.is_in_onnx_export()`` inside one :func:`export_flag` section."""

    count: int = 0


def _make_stand_in(original: Callable[[], bool]) -> Callable[[], bool]:
    def is_in_onnx_export() -> bool:
        stack = getattr(_answers, "stack", None)
        if not stack:
            return original()
        answer, reads = stack[-1]
        reads.count += 1
        if answer is None:
            raise ExportBranchError("the code branches on torch.onnx.is_in_onnx_export(); a trace would keep only one branch")
        return answer

    is_in_onnx_export.fxpool_original = original  # type: ignore[attr-defined]
    return is_in_onnx_export


@contextmanager
def export_flag(answer: bool | None) -> Iterator[FlagReads]:
    """While inside, ``torch.onnx.is_in_onnx_export()`` answers ``answer`` in this thread (``None``: raises
    :class:`ExportBranchError`); the yielded :class:`FlagReads` counts the questions."""
    reads = FlagReads()
    with LOCK:
        original = torch.onnx.is_in_onnx_export
        torch.onnx.is_in_onnx_export = _make_stand_in(getattr(original, "fxpool_original", original))
        if not hasattr(_answers, "stack"):
            _answers.stack = []
        _answers.stack.append((answer, reads))
        try:
            yield reads
        finally:
            _answers.stack.pop()
            torch.onnx.is_in_onnx_export = original


def is_stand_in(value: Any) -> bool:
    """True for fxpool's stand-in of ``is_in_onnx_export`` (tests check none is left behind)."""
    return hasattr(value, "fxpool_original")
