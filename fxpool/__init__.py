"""fxpool: exact, export-friendly replacements for adaptive pooling in PyTorch models.

The public API is the names in ``__all__``. They are imported on first use: ``import fxpool`` and ``fxpool --help``
load neither torch nor onnx, so the command line answers at once."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Each public name, and the module that defines it; every public error and warning type is in `errors`.
_HOME = {
    "ConversionReport": "report",
    "ExportResult": "exporting",
    "PoolRecord": "report",
    "SelfCheck": "checking",
    "convert": "convert",
    "explain": "convert",
    "export": "exporting",
    "onnx_export_hook": "hooking",
    "report_of": "report",
}

__all__ = [
    "ConversionReport",
    "ExampleInputError",
    "ExportFailedError",
    "ExportRequestError",
    "ExportResult",
    "ExportVerificationError",
    "FxpoolError",
    "FxpoolWarning",
    "MissingDependencyError",
    "OutputFileError",
    "PoolCallError",
    "PoolRecord",
    "SelfCheck",
    "SelfCheckError",
    "SpatialSizeError",
    "SpecialisedArgumentError",
    "UnconvertedPoolError",
    "UnconvertedPoolWarning",
    "UnsupportedModelError",
    "UnsupportedOpsetError",
    "convert",
    "explain",
    "export",
    "onnx_export_hook",
    "report_of",
]

if TYPE_CHECKING:
    from .checking import SelfCheck
    from .convert import convert, explain
    from .errors import (
        ExampleInputError,
        ExportFailedError,
        ExportRequestError,
        ExportVerificationError,
        FxpoolError,
        FxpoolWarning,
        MissingDependencyError,
        OutputFileError,
        PoolCallError,
        SelfCheckError,
        SpatialSizeError,
        SpecialisedArgumentError,
        UnconvertedPoolError,
        UnconvertedPoolWarning,
        UnsupportedModelError,
        UnsupportedOpsetError,
    )
    from .exporting import ExportResult, export
    from .hooking import onnx_export_hook
    from .report import ConversionReport, PoolRecord, report_of
else:

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module on first use; else a submodule (``fxpool.errors``)."""
        home = _HOME.get(name) or ("errors" if name in __all__ and name.endswith(("Error", "Warning")) else None)
        if home is not None:
            value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
            if name != "convert":  # the function `convert` is a property of the package (below)
                globals()[name] = value
            return value
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))

    class _Package(types.ModuleType):
        """The package's module type: ``fxpool.convert`` stays the function once the submodule is imported.

        Importing the submodule ``fxpool.convert`` sets the package's attribute ``convert`` to it; the property's
        setter ignores that, as ``from .convert import convert`` in an eager ``__init__`` would."""

        @property
        def convert(self) -> Any:
            return importlib.import_module(f"{__name__}.convert").convert

        @convert.setter
        def convert(self, value: Any) -> None:
            pass

    sys.modules[__name__].__class__ = _Package
