"""The errors fxpool raises for what it refuses. All derive from :class:`FxpoolError`."""

from __future__ import annotations


class FxpoolError(Exception):
    """Base of every error fxpool raises on purpose."""


class ExampleInputError(FxpoolError, ValueError):
    """The example input cannot drive the model: wrong type, wrong rank, or its forward raised."""


class PoolCallError(FxpoolError, ValueError):
    """An adaptive pool in the model was called with arguments it cannot accept."""


class UnconvertedPoolError(FxpoolError):
    """``strict=True`` and at least one adaptive pool would be left unconverted."""


class SpatialSizeError(FxpoolError, ValueError):
    """A shape-specialised replacement saw a spatial size other than the one it was traced with."""


class ExportVerificationError(FxpoolError):
    """An exported ONNX graph failed its check or disagreed with PyTorch."""


class UnsupportedModelError(FxpoolError, TypeError):
    """The model is of a kind fxpool cannot convert (a TorchScript module, say)."""


class SelfCheckError(FxpoolError):
    """``strict=True`` and the converted model did not match the original on the example at once."""


class SpecialisedArgumentError(FxpoolError, ValueError):
    """A converted model was given an optional argument the example left ``None``, or the reverse."""


class ExportFailedError(FxpoolError, RuntimeError):
    """``torch.onnx.export`` failed on a converted model; the message holds the conversion report."""


def error_summary(error: BaseException) -> str:
    """``TypeName: first line of the message``, for reports and error texts."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()
