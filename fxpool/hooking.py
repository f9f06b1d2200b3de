"""The pre-export hook: ``torch.onnx.export`` calls inside ``onnx_export_hook()`` export the converted model.

The hook answers the calling thread's calls only, through the stand-in of ``torch.onnx.export``
(`fxpool.globalstate.export_handler`), so scripts the user cannot edit are served too; it converts and exports through
the same calls as `fxpool.export` (`fxpool.exporting`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from .errors import ExportFailedError, FxpoolError
from .example import read_example
from .exporting import (
    check_export_request,
    convert_for_export,
    export_failure,
    export_with_translations,
    refuse_dynamic_spatial_axes_for,
)
from .globalstate import export_handler
from .report import REPORT_ATTRIBUTE, ConversionReport


@contextmanager
def onnx_export_hook(*, strict: bool = False, dynamic: bool = False) -> Iterator[None]:
    """Within this block, ``torch.onnx.export(model, args, ...)`` exports ``fxpool.convert(model, args)``.

    The caller's model is untouched; converted models are exported as they are. Only the thread that entered converts;
    other threads' exports run one at a time with it. Blocks may nest and be left in any order."""
    with export_handler(functools.partial(_hooked_export, strict, dynamic)):
        yield


def _hooked_export(
    strict: bool, dynamic: bool, original: Callable[..., Any], model: Any, args: Any, f: Any, /, *rest: Any, **kwargs: Any
) -> Any:
    """``torch.onnx.export`` in a thread inside a hook: convert, then export with fxpool's translations.

    The hook's options are positional-only, so an exporter keyword of the same name stays in ``kwargs``."""
    check_export_request(kwargs, False, "torch.onnx.export under fxpool.onnx_export_hook")
    if isinstance(model, nn.Module) and not hasattr(model, REPORT_ATTRIBUTE):
        model = convert_for_export(model, read_example(args, kwargs.get("kwargs")), dynamic, strict)
    report = getattr(model, REPORT_ATTRIBUTE, None)
    if isinstance(model, nn.Module) and report is not None:
        refuse_dynamic_spatial_axes_for(model, kwargs)
    try:
        return export_with_translations(original, model, args, f, *rest, **kwargs)
    except FxpoolError:
        raise
    except Exception as error:
        if isinstance(report, ConversionReport) and report.unexportable:  # say which pools it left, and why
            raise ExportFailedError(export_failure(error, report)) from error
        raise
