"""The process-wide state fxpool has to touch, behind one lock, and always put back.

Converting and exporting touch state of the whole process: the random-number generators, torch.fx's patch of
``nn.Module.__call__``, ``torch.onnx.is_in_onnx_export``, the TorchScript exporter's symbolic registry and both
exporters' flags. :data:`LOCK` (re-entrant: ``export`` converts inside it) serialises every such section, so two of
them never restore each other's saved values. The stand-ins put in place here answer differently in the thread that
asked for them only; other threads see the real answer or wait on the lock."""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from .errors import ExportFailedError

LOCK = threading.RLock()


class ExportBranchError(Exception):
    """Raised by code that branches on ``torch.onnx.is_in_onnx_export()`` where no branch may be taken."""


@dataclass
class FlagReads:
    """How often the code asked ``torch.onnx.is_in_onnx_export()`` inside one :func:`export_flag` section."""

    count: int = 0


class _ThreadStacks(threading.local):
    """This thread's sections, innermost last: :func:`export_flag`'s (answer, reads), :func:`export_handler`'s handlers."""

    def __init__(self) -> None:
        self.answers: list[tuple[bool | None, FlagReads]] = []
        self.handlers: list[Callable[..., Any]] = []


_stacks = _ThreadStacks()


def _make_stand_in(original: Callable[[], bool]) -> Callable[[], bool]:
    def is_in_onnx_export() -> bool:
        if not _stacks.answers:
            return original()
        answer, reads = _stacks.answers[-1]
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
        stand_in = _make_stand_in(getattr(original, "fxpool_original", original))
        torch.onnx.is_in_onnx_export = stand_in
        _stacks.answers.append((answer, reads))
        try:
            yield reads
        finally:
            _stacks.answers.pop()
            torch.onnx.is_in_onnx_export = original
            _forget_in_dynamo(stand_in)


def _forget_in_dynamo(stand_in: Callable[[], bool]) -> None:
    """Drop Dynamo's cached tables of torch functions built while ``stand_in`` was in place: they hold it, and every
    later ``torch.compile``/``torch.export(strict=True)`` of code asking the real one fails ("marked as skipped")."""
    for module, table in (
        ("torch._dynamo.trace_rules", "get_torch_obj_rule_map"),
        ("torch._dynamo.variables.torch", "tracing_state_functions"),
    ):
        cached: Any = getattr(sys.modules.get(module), table, None)
        if hasattr(cached, "cache_info") and cached.cache_info().currsize and stand_in in cached():  # dicts keyed by function
            cached.cache_clear()


# How long an export waits for another thread's torch.onnx.export already in flight.
IN_FLIGHT_TIMEOUT_S = 600.0
_routes = 0  # across threads: torch.onnx.export is the stand-in while above 0 (hooks, fxpool's exports)
_unpatched_export: Callable[..., Any] | None = None
_patched_export: Callable[..., Any] | None = None  # what torch.onnx.export is while patched


def wait_for_exports_in_flight() -> None:
    """Wait until no other thread is inside ``torch.onnx.export`` (whose flags are process-wide)."""
    from torch.onnx._internal.exporter import _flags
    from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

    deadline = time.monotonic() + IN_FLIGHT_TIMEOUT_S
    while GLOBALS.in_onnx_export or _flags._is_onnx_exporting:
        if time.monotonic() > deadline:
            raise ExportFailedError(
                f"another thread's torch.onnx.export has been running for {IN_FLIGHT_TIMEOUT_S:.0f} s; fxpool waits for "
                f"it before exporting (the exporters' state is process-wide). Export one model at a time"
            )
        time.sleep(0.005)


def unpatched_export(export_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The exporter itself where ``export_fn`` is fxpool's stand-in of ``torch.onnx.export``."""
    return _unpatched_export if getattr(export_fn, "fxpool_stand_in", False) and _unpatched_export is not None else export_fn


@contextmanager
def exports_routed() -> Iterator[None]:
    """While inside, ``torch.onnx.export`` is fxpool's stand-in (:func:`_stand_in_for`) in every thread, till the last leaves."""
    global _routes, _unpatched_export, _patched_export
    with LOCK:
        if _routes == 0:
            _unpatched_export = torch.onnx.export
            _patched_export = torch.onnx.export = _stand_in_for(_unpatched_export)
        _routes += 1
    try:
        yield
    finally:
        with LOCK:
            _routes -= 1
            if _routes == 0:
                if torch.onnx.export is _patched_export and _unpatched_export is not None:  # else: leave theirs
                    torch.onnx.export = _unpatched_export
                _patched_export = None


@contextmanager
def export_handler(handler: Callable[..., Any]) -> Iterator[None]:
    """While inside, this thread's ``torch.onnx.export(model, args, f, ...)`` calls go to
    ``handler(exporter, model, args, f, ...)``; handlers nest, and may be left in any order."""
    with exports_routed():
        stack = _stacks.handlers
        stack.append(handler)
        try:
            yield
        finally:
            del stack[max(i for i, h in enumerate(stack) if h is handler)]


def _stand_in_for(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.onnx.export``'s stand-in while patched, with its name, docstring and signature
    (``functools.wraps``: ``inspect.signature`` follows ``__wrapped__``). Callers read the signature:
    timm's ``onnx_export`` looks for a ``dynamo`` parameter, and takes the TorchScript exporter, or
    asserts, where it finds none."""

    @functools.wraps(original)
    def export(model: Any, args: Any = (), f: Any = None, *rest: Any, **kwargs: Any) -> Any:
        if not _stacks.handlers:
            with LOCK:
                return original(model, args, f, *rest, **kwargs)
        return _stacks.handlers[-1](original, model, args, f, *rest, **kwargs)

    export.fxpool_stand_in = True  # type: ignore[attr-defined]
    return export
