"""The record of every decision ``convert`` makes: one :class:`PoolRecord` per adaptive pool found; a
:class:`ConversionReport` prints within :data:`REPORT_WIDTH` columns and converts to plain dicts for JSON."""

from __future__ import annotations

import textwrap
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any
from weakref import WeakKeyDictionary

from torch import nn

from .checking import SelfCheck

REPORT_ATTRIBUTE = "fxpool_report"
REPORT_WIDTH = 100  # columns of a terminal the printed report fits; to_dict() keeps every text whole


@dataclass(frozen=True)
class PoolRecord:
    """One adaptive pool: where it is, what it was asked, and what replaced it or why nothing did."""

    location: str  # qualified module name, or "<scope>:<graph node>" for a functional call
    form: str  # "module", "functional", "aten" (a graph's node) or "traced" (found by the proof alone)
    op: str
    input_shape: tuple[int, ...] | None
    output_size: str  # as requested in the model
    output_shape: tuple[int, ...] | None
    converted: bool
    replacement: str  # what computes it now ("left to PyTorch" when unconverted)
    reason: str
    onnx_replacement: str = ""  # what ONNX export runs instead, where it has a form of its own (PoolPlan.onnx_steps)
    size_agnostic: bool = False
    source: str | None = None
    export_translated: bool = False  # left, but an average pool on float input, lowered exactly by fxpool's exports
    family: str = ""  # "avg" or "max" ("" where the pool was never seen)
    kind: str = ""  # what report.counts() counts: the first op of the replacement (PoolPlan.kind), or "dynamic"
    export_branch: bool = False  # a pool only the export branch runs (code asking torch.onnx.is_in_onnx_export())
    calls: int = 1  # how often the example run called this pool (a module called from two places: 2)
    global_output: bool = False  # the model asks for output size 1 on every axis

    @property
    def exports_exactly(self) -> bool:
        """Whether fxpool's exports carry this pool as exact, portable ONNX."""
        return self.converted or self.export_translated

    @property
    def global_average(self) -> bool:
        """Left to PyTorch, but an average pool on float input to output size 1 on every axis: every exporter
        lowers that exactly (TorchScript's as GlobalAveragePool, dynamo's as a mean, ``torch.export`` keeps
        the op), so it needs no replacement for the converted model to export on its own."""
        return not self.converted and self.export_translated and self.global_output


@dataclass(frozen=True)
class ConversionReport:
    """Every record, and the modules whose forward has functional pool calls intercepted."""

    records: tuple[PoolRecord, ...]
    intercepted: tuple[str, ...] = ()  # qualified names of modules whose functional pool calls run replacements
    check: SelfCheck | None = None  # what convert compared after converting (None: not run)
    proved_by: str = ""  # the tracer whose native pools are all in the records (fxpool.proving; "": none ran)

    @property
    def converted(self) -> tuple[PoolRecord, ...]:
        return tuple(r for r in self.records if r.converted)

    @property
    def unconverted(self) -> tuple[PoolRecord, ...]:
        return tuple(r for r in self.records if not r.converted)

    @property
    def stands_alone(self) -> bool:
        """Whether every pool was replaced (or is a global average, :attr:`PoolRecord.global_average`), so
        plain ``torch.onnx.export``/``torch.export`` of the converted model gives the exact graph with no
        fxpool code around the call. Proven where :attr:`proved_by` names a tracer: every native pool it
        saw in the converted model is a record here (one found nowhere else is recorded as left)."""
        return all(r.global_average for r in self.unconverted)

    @property
    def unexportable(self) -> tuple[PoolRecord, ...]:
        """Pools fxpool's exports leave to the stock exporter: unconverted and not translated at export."""
        return tuple(r for r in self.records if not r.exports_exactly)

    def counts(self) -> dict[str, int]:
        """How many pools got each replacement kind (``PoolRecord.kind``; ``unconverted`` for the rest)."""
        return dict(Counter(r.kind if r.converted else "unconverted" for r in self.records))

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": [asdict(r) for r in self.records],
            "intercepted": list(self.intercepted),
            "check": None if self.check is None else asdict(self.check),
            "proved_by": self.proved_by,
        }

    def table(self, width: int = REPORT_WIDTH) -> str:
        """A block per pool, every line within ``width`` columns: where the pool is, its op and sizes, then
        what replaced it, the form ONNX export runs where it has one of its own, and why (long texts wrap
        under their label)."""
        lines: list[str] = []
        for r in self.records:
            lines += _wrap(f"{r.location}  {r.op}  {_shape(r.input_shape)} -> {r.output_size}", width, "", "    ")
            replacement = r.replacement + (
                "" if r.converted else " (export: fxpool translation)" if r.export_translated else " (!)"
            )
            for label, text in (("replacement", replacement), ("in ONNX", r.onnx_replacement), ("why", r.reason)):
                if text:
                    lines += _wrap(text, width, f"    {label:<13}", " " * 17)
        return "\n".join(lines)

    def summary(self) -> str:
        if self.records and all(r.form == "aten" for r in self.records):
            reached = "ATen operators of the exported graph rewritten"
        elif self.intercepted:
            names = ", ".join(name or "<root>" for name in self.intercepted[:5]) + (" ..." if len(self.intercepted) > 5 else "")
            reached = f"functional calls intercepted in the forward of {len(self.intercepted)} module(s): {names}"
        else:
            reached = "pool modules swapped in place"
        translated = len(self.unconverted) - len(self.unexportable)
        at_export = f" ({translated} of them exported exactly by fxpool's translations)" if translated else ""
        if not self.records:
            alone = ""
        elif self.stands_alone and self.unconverted:
            alone = (
                f"; the converted model exports exactly on its own (the {len(self.unconverted)} left are global "
                f"averages, output size 1, which every exporter lowers exactly)"
            )
        elif self.stands_alone:
            alone = "; every pool replaced: the converted model exports exactly on its own"
        else:
            only = ", and only fxpool.export and onnx_export_hook lower them exactly" if translated == len(self.unconverted) else ""
            alone = (
                f"; NOT standalone: plain torch.onnx.export or torch.export of the converted model leaves those "
                f"{len(self.unconverted)} to the stock exporters{only}"
            )
        proof = f"; checked by {self.proved_by}" if self.proved_by and self.records else ""
        return (
            f"{len(self.records)} adaptive pool(s): {len(self.converted)} converted, "
            f"{len(self.unconverted)} left to PyTorch{at_export}; {reached}{alone}{proof}"
        )

    def __str__(self) -> str:
        """The summary, a block per pool and the self-check, within :data:`REPORT_WIDTH` columns."""
        parts = ["\n".join(_wrap(self.summary(), REPORT_WIDTH, "", "  "))]
        if self.records:
            parts.append(self.table())
        if self.check is not None:
            parts += ["\n".join(_wrap(line, REPORT_WIDTH, "", "  ")) for line in self.check.summary().splitlines()]
        return "\n".join(parts)


def _shape(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "x".join(map(str, shape))


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` in lines of at most ``width`` columns after ``first``, then ``rest``; an overlong word (a module path) is broken."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False) or [first.rstrip()]


# The reports of converted torch.export programs (ExportedProgram objects carry no attributes of ours).
_PROGRAM_REPORTS: WeakKeyDictionary[Any, ConversionReport] = WeakKeyDictionary()


def attach_report(converted: Any, report: ConversionReport) -> None:
    """Make ``report`` what :func:`report_of` gives for ``converted`` (a module, or an ``ExportedProgram``)."""
    if isinstance(converted, nn.Module):
        setattr(converted, REPORT_ATTRIBUTE, report)
    else:
        _PROGRAM_REPORTS[converted] = report


def report_of(module: nn.Module | Any) -> ConversionReport:
    """The report ``fxpool.convert`` attached to the module (or ``torch.export`` program) it returned."""
    report = getattr(module, REPORT_ATTRIBUTE, None) if isinstance(module, nn.Module) else _PROGRAM_REPORTS.get(module)
    if not isinstance(report, ConversionReport):
        raise ValueError("this module was not returned by fxpool.convert, so it carries no report")
    return report
