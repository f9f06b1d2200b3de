"""fxpool: exact, export-friendly replacements for adaptive pooling in PyTorch models."""

from __future__ import annotations

from .checking import SelfCheck
from .convert import convert, explain
from .errors import (
    ExampleInputError,
    ExportFailedError,
    ExportVerificationError,
    FxpoolError,
    PoolCallError,
    SelfCheckError,
    SpatialSizeError,
    SpecialisedArgumentError,
    UnconvertedPoolError,
    UnsupportedModelError,
)
from .exporting import ExportResult, export, onnx_export_hook
from .report import ConversionReport, PoolRecord, report_of

__version__ = "0.1.0"

__all__ = [
    "ConversionReport",
    "ExampleInputError",
    "ExportFailedError",
    "ExportResult",
    "ExportVerificationError",
    "FxpoolError",
    "PoolCallError",
    "PoolRecord",
    "SelfCheck",
    "SelfCheckError",
    "SpatialSizeError",
    "SpecialisedArgumentError",
    "UnconvertedPoolError",
    "UnsupportedModelError",
    "convert",
    "explain",
    "export",
    "onnx_export_hook",
    "report_of",
]
