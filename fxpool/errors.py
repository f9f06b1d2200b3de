"""What fxpool refuses (`FxpoolError` and its subclasses, each message naming the pool or the input, the shapes
and the way out), and what a non-strict call accepted but the caller should know (`FxpoolWarning`)."""

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


class MissingDependencyError(FxpoolError, ImportError):
    """An optional dependency (an extra of the package) is not installed; the message names the pip line."""


class ExportRequestError(FxpoolError, ValueError):
    """An export asked for in a way the chosen exporter would get wrong or refuse; the message names what to ask."""


class UnsupportedOpsetError(ExportRequestError):
    """An ONNX opset the chosen exporter does not write; the message names the opsets it does."""


class OutputFileError(FxpoolError, OSError):
    """The output file cannot be written: a folder, a missing or read-only folder, a full disk."""


class FxpoolWarning(UserWarning):
    """Base of every warning fxpool emits."""


class UnconvertedPoolWarning(FxpoolWarning):
    """A non-strict ``convert`` left an adaptive pool to PyTorch, or its self-check undid a replacement."""


# The extras of fxpool that bring optional modules, and the packages each installs: the packages are what
# the message names, since fxpool itself may not be on the user's package index.
EXTRA_PACKAGES = {"onnx": ("onnx", "onnxruntime", "onnxscript"), "zoo": ("torchvision", "onnx", "onnxruntime", "onnxscript")}


def require(module: str, needed_by: str) -> None:
    """Import ``module`` or raise `MissingDependencyError` naming it, ``needed_by`` and the ``pip install`` line."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as error:
        extra = next((name for name, packages in EXTRA_PACKAGES.items() if module in packages), None)
        packages = " ".join(EXTRA_PACKAGES[extra]) if extra else module
        where = f' (the packages of fxpool\'s "{extra}" extra; from a checkout: pip install ".[{extra}]")' if extra else ""
        raise MissingDependencyError(
            f"{needed_by} needs {module}, which failed to import ({type(error).__name__}: {error}). "
            f"Install it: pip install {packages}{where}"
        ) from error


def error_summary(error: BaseException) -> str:
    """``TypeName: first line of the message``, for reports and error texts."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()
