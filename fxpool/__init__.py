"""fxpool: exact, export-friendly replacements for adaptive pooling in PyTorch models."""

from __future__ import annotations

from .convert import convert, plan
from .errors import (
    ExampleInputError,
    ExportVerificationError,
    FxpoolError,
    PoolCallError,
    SpatialSizeError,
    UnconvertedPoolError,
)
from .exporting import ExportResult, export, onnx_export_hook
from .report import ConversionReport, PoolRecord, report_of

__version__ = "0.1.0"

__all__ = [
    "ConversionReport",
    "ExampleInputError",
    "ExportResult",
    "ExportVerificationError",
    "FxpoolError",
    "PoolCallError",
    "PoolRecord",
    "SpatialSizeError",
    "UnconvertedPoolError",
    "convert",
    "export",
    "onnx_export_hook",
    "plan",
    "report_of",
]
