"""The model-zoo sweep: models with adaptive pools from torchvision, timm, smp, transformers, MONAI, pytorchcv
and third-party libraries, converted, exported, checked — each case in a process of its own, on Ray or local
worker processes.

Run ``python -m model_zoo_checks.zoo`` (the README's main command) for the default set (a dozen
torchvision models and a few timm, smp, transformers and MONAI ones, those installed), ``--all`` for
every model of the suites' sweeps (``--suite torchvision|timm|smp|transformers|monai|thirdparty|pytorchcv|all``;
see :mod:`model_zoo_checks.catalog`), ``--every-model`` for every model their libraries register. Per
(model, input shape) :func:`check` records the adaptive pools the original
calls, counted by :mod:`model_zoo_checks.census` independently of fxpool's report (in eager and with
``torch.onnx.is_in_onnx_export()`` true), the pools and their replacements, the eager error of the
converted model (per dtype on ``--device cuda``), the stock exports of the original, and the
**plain** exports of the converted model — ``torch.onnx.export`` with each exporter and
``torch.export.export``, no fxpool code around the call, as a user would run them after
``fxpool.convert`` — each verified against the original (onnxruntime, or eagerly), onnxruntime
latency against the dynamo export of the original, and a status. The **PT2** stage (``pt2`` among
``--exporters``) exports the original with ``torch.export.export``, converts that program
(``fxpool.convert(program)``: a new program, every ATen pool replaced) and runs it against the
original. ``fxpool.export`` runs where a plain export fails or the report leaves a pool to PyTorch:
a plain export failing where ``fxpool.export`` succeeds fails the case (the converted model must stand on its own). Where every
pool is replaced, ``fxpool.export`` would export the very same converted graph (its translations
apply only to pools left native), so it is not run twice.

Each case runs in a worker process of its own (:mod:`model_zoo_checks.isolation`) under a time and a
memory limit, started once more after a crash; Ray schedules the cases where it is installed (a local
instance, or a cluster with ``--address`` / ``RAY_ADDRESS``), local worker processes otherwise
(:mod:`model_zoo_checks.backends`). The longest cases start first (:mod:`model_zoo_checks.plan`). Each
finished case is appended to ``REPORT/cases.jsonl`` at once (:mod:`model_zoo_checks.journal`);
``REPORT/report.json`` and ``report.md`` follow every few seconds, and at the end ``zoo.svg`` and
``zoo.png`` (models x stages) and ``compatibility.csv``. The exporters' output goes to
``REPORT/logs/<case>.log``; the console keeps the progress bar, failures and a summary. ``--resume`` keeps
every case a previous run in REPORT finished and runs the rest (``--rerun-failures``: the failed ones too).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils._pytree import tree_leaves

import fxpool
from fxpool.errors import ExportVerificationError
from fxpool.exporting import exporter_reason
from fxpool.sizechecks import traced_forms
from fxpool.verifying import op_histogram, run_onnxruntime, verify_onnx

from . import backends, isolation, journal, plan, registry
from .benchmarks import onnx_case
from .catalog import DEFAULT_SHAPES, SUITES, build, cost, default_names, every_name, installed, not_swept, suite_of, swept_names
from .census import pool_calls
from .isolation import Finished, Limits
from .options import DTYPES, add_device_options, device_and_dtypes, ort_provider, ort_sessions
from .reporting import counts, summary, write_reports
from .timing import side_by_side

DECOMPOSITION_OPS = ("GatherND", "GatherElements", "Where", "ScatterND", "Loop")  # what the stock dynamo graph falls to
TRIVIAL_REPLACEMENTS = ("mean", "identity")  # no pool-level timing: nothing to compare
POOL_TIMING_REPEATS = 15
# Converted against original, largest |difference| allowed: in float32 times the output's largest
# magnitude where that is over 1 (random-weight segmentation heads reach hundreds), in the half types
# relative to it (both models round every layer; only the pools differ).
EAGER_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
# onnxruntime against PyTorch on whole models (fxpool.verify_onnx's bound: |ort - torch| <= ONNX_ATOL
# x output scale + ONNX_RTOL x |torch|): random-weight networks reach outputs in the thousands, where
# float32 accumulation alone leaves 1e-4-relative differences, in the stock export of the original too.
ONNX_RTOL, ONNX_ATOL = 1e-3, 1e-4
# Where both fxpool's graph and the stock one disagree with PyTorch (tied detection scores), how close
# fxpool's must be to the stock graph's outputs, relative to their largest magnitude.
STOCK_AGREEMENT = 1e-4

CaseStatus = Literal["pass", "fail", "skip"]
EXPORTERS = ("torchscript", "dynamo", "torch.export", "pt2")


@dataclass
class Case:
    model: str
    input_shape: tuple[int, ...]
    status: CaseStatus = "fail"
    reason: str = ""
    device: str = "cpu"
    suite: str = "torchvision"
    # Adaptive pool calls per function, counted by running the model (not from fxpool's report):
    # the original's, and the converted model's (those left to PyTorch); then the same with
    # torch.onnx.is_in_onnx_export() true, the branch the ONNX exporters take.
    pool_calls: dict[str, int] = field(default_factory=dict)
    pool_calls_converted: dict[str, int] = field(default_factory=dict)
    pool_calls_export: dict[str, int] = field(default_factory=dict)
    pool_calls_converted_export: dict[str, int] = field(default_factory=dict)
    pools: int = 0
    export_branch_pools: int = 0  # records of pools only the export branch runs (in ``pools`` too)
    # Calls the report accounts for, per record (a pool module called from two places is one record,
    # two calls): the eager ones, and those of the pools it leaves to PyTorch.
    reported_calls: int = 0
    reported_calls_left: int = 0
    replacements: dict[str, int] = field(default_factory=dict)
    unconverted: int = 0
    unconverted_export_branch: int = 0  # of ``unconverted``, those only the export branch runs
    convert_s: float | None = None
    output_scale: float | None = None  # the original's largest output magnitude (float32, eager)
    forward_s: float | None = None  # one eager forward of the original on the example (median of 3)
    eager_max_error: float | None = None  # float32, absolute
    eager_errors: dict[str, float] = field(default_factory=dict)  # per dtype (half types: relative)
    stock_torchscript: str = ""
    torchscript_ort_error: float | None = None
    torch_export_error: float | None = None  # the converted model's torch.export program against the original, eager
    dynamo_ort_error: float | None = None
    ort_provider: str = ""
    converted_ops: dict[str, int] = field(default_factory=dict)
    original_dynamo_ops: dict[str, int] = field(default_factory=dict)
    ort_ms_converted: float | None = None
    ort_ms_original_dynamo: float | None = None
    ort_speedup: float | None = None
    # The same fxpool graph timed twice side by side: how far a ratio of identical graphs strays.
    ort_noise: float | None = None
    # Exportability, each "ok", "ok: GatherND, Where" (exports, as the stock decomposition) or
    # "fails: <the exporter's reason>"; "" when not tried. stock_*: the original; converted_*: plain
    # torch.onnx.export / torch.export.export of fxpool.convert's model, no fxpool code around the
    # call; fxpool_*: fxpool.export, run only where a plain export failed or a pool was left.
    stock_dynamo: str = ""
    converted_torchscript: str = ""
    converted_dynamo: str = ""
    converted_torch_export: str = ""
    # PT2 in, PT2 out: the original's torch.export program converted by fxpool.convert(program), "ok",
    # "fails: <why>", or "" where not tried (the original does not torch.export: said in the notes);
    # the program's pools (the report's records), those replaced, and its largest error against the original.
    pt2: str = ""
    pt2_pools: int | None = None
    pt2_converted: int | None = None
    pt2_error: float | None = None
    fxpool_torchscript: str = ""
    fxpool_dynamo: str = ""
    # Per distinct pool that is not a plain mean: onnxruntime ms of fxpool's one-pool graph and of
    # the dynamo exporter's graph of the native pool (None where that does not export).
    pool_speeds: list[dict[str, Any]] = field(default_factory=list)
    # "ok" where the conversion passed the eager checks (pools, census, error), "fails" where it did not,
    # "" where it was not reached (the model did not build or run, or a report from before this field).
    convert: str = ""
    details: list[str] = field(default_factory=list)  # full texts of the errors the notes summarise
    log: str = ""  # the case's third-party output, relative to the report folder
    seconds: float = 0.0
    # The worker process (model_zoo_checks.isolation): how many were started (2 after a crash), what stopped
    # the last one where it wrote no case ("SIGSEGV", "time limit of 900 s"), its largest resident memory,
    # its wall time with the interpreter's start and imports, and the machine it ran on.
    attempts: int = 1
    stopped: str = ""
    peak_memory_mb: float | None = None
    cpu_seconds: float | None = None  # the worker's CPU time, all its threads (onnxruntime's too): core-seconds
    worker_seconds: float | None = None
    host: str = ""

    @property
    def convert_forwards(self) -> float | None:
        """Conversion time in eager forwards of the original (issue: at most 3)."""
        return self.convert_s / self.forward_s if self.convert_s and self.forward_s else None


def ort_latencies(sessions: dict[str, Any], x: torch.Tensor, repeats: int = 9) -> dict[str, float]:
    """Median milliseconds per graph, the graphs alternating within every repeat after a warm-up run,
    so that load from elsewhere on the machine falls on all of them alike."""
    feeds = {name: {s.get_inputs()[0].name: x.cpu().numpy()} for name, s in sessions.items()}
    seconds = side_by_side(
        {name: (lambda s=s, f=feeds[name]: s.run(None, f)) for name, s in sessions.items()}, repeats, warmup=1, sample_s=0.0
    )
    return {name: value * 1e3 for name, value in seconds.items()}


@dataclass(frozen=True)
class _Original:
    """The model of a case, its input, and its output in eager PyTorch."""

    model: torch.nn.Module
    x: torch.Tensor
    expected: Any


class CaseFailed(Exception):
    """A check of the case failed (a verdict, not an error of the sweep)."""


class CaseSkipped(Exception):
    """The case cannot be checked (a known limitation, or the original itself does not run)."""


def check(
    name: str,
    shape: tuple[int, ...],
    workdir: str,
    exporters: Sequence[str],
    device: str = "cpu",
    dtypes: Sequence[str] = ("float32",),
) -> Case:
    """Convert, compare and export one model at one input shape; never raises.

    The stages fill ``case`` in order (the original, the conversion in eager, each exporter); a
    stage that finds a check failed raises :class:`CaseFailed`, and any other exception is the
    case's failure too, its traceback kept in ``case.details`` and the case's log.
    """
    case = Case(name, tuple(shape), device=device, suite=suite_of(name))
    started = time.perf_counter()
    notes: list[str] = []
    casedir = tempfile.mkdtemp(dir=workdir)
    try:
        if not_swept(name):
            raise CaseSkipped(not_swept(name))
        original = _run_original(case)
        case.convert = "fails"
        converted, report = _check_eager(case, original, dtypes)
        case.convert = "ok"
        stock_torchscript = _export_path(casedir, name, "orig_ts")
        case.stock_torchscript = _stock_torchscript(original, stock_torchscript, case.details)
        case.ort_provider = ort_provider(device)
        if "torchscript" in exporters:
            _check_torchscript(case, original, converted, report, casedir, stock_torchscript, notes)
        if "dynamo" in exporters:
            _check_dynamo(case, original, converted, report, casedir, notes)
            if case.ort_provider == "CPUExecutionProvider":
                case.pool_speeds = pool_speeds(report, casedir)
        if "torch.export" in exporters:
            _check_torch_export(case, original, converted, notes)
        if "pt2" in exporters:
            _check_pt2(case, original, notes)
        case.status = "pass" if not case.unconverted else "fail"
        if case.unconverted:
            notes.append("; ".join(r.reason for r in report.unconverted))
    except CaseSkipped as skipped:
        case.status = "skip"
        notes.append(str(skipped)[:300])
    except CaseFailed as failed:
        case.status = "fail"
        notes.append(str(failed))
    except Exception as error:
        case.status = "fail"
        notes.append(exporter_reason(error))
        case.details.append(traceback.format_exc())
        traceback.print_exc(file=sys.stderr)  # the case's log (the console keeps one FAIL line)
    finally:
        case.reason = "; ".join(notes)
        case.seconds = time.perf_counter() - started
        shutil.rmtree(casedir, ignore_errors=True)
    return case


def _run_original(case: Case) -> _Original:
    """Build the model and run it once, counting the adaptive pools it calls (in eager and under export)."""
    torch.manual_seed(0)
    try:
        model = build(case.model, case.input_shape)
    except Exception as error:
        case.details.append(traceback.format_exc())
        raise CaseFailed(f"the model cannot be built: {type(error).__name__}: {error}"[:300]) from error
    x = torch.randn(case.input_shape)
    try:
        with torch.no_grad():
            expected = model(x)
        case.forward_s = forward_seconds(model, x)
        case.pool_calls = pool_calls(model, x)
        case.pool_calls_export = pool_calls(model, x, export_branch=True)
    except Exception as error:
        raise CaseSkipped(f"the original model does not run at {case.input_shape}: {error}") from error
    return _Original(model, x, expected)


def forward_seconds(model: torch.nn.Module, x: torch.Tensor, repeats: int = 3) -> float:
    """The median time of one eager forward (no grad), after the run that built the expected output."""
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            started = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def _check_eager(case: Case, original: _Original, dtypes: Sequence[str]) -> tuple[torch.nn.Module, fxpool.ConversionReport]:
    """Convert, compare with the original in eager (per dtype off the CPU), and count the pools left."""
    model, x = original.model, original.x
    t0 = time.perf_counter()
    converted = fxpool.convert(model, x)
    case.convert_s = time.perf_counter() - t0
    report = fxpool.report_of(converted)
    case.pools, case.replacements, case.unconverted = len(report.records), report.counts(), len(report.unconverted)
    case.export_branch_pools = sum(r.export_branch for r in report.records)
    case.unconverted_export_branch = sum(r.export_branch for r in report.unconverted)
    case.reported_calls = sum(r.calls for r in report.records if not r.export_branch)
    case.reported_calls_left = sum(r.calls for r in report.unconverted if not r.export_branch)
    with torch.no_grad():
        case.eager_max_error = max_error(converted(x), original.expected)
    case.output_scale = output_scale(original.expected)
    with traced_forms():  # eager runs PyTorch's kernel for general max windows; count the exported form
        case.pool_calls_converted = pool_calls(converted, x)
        case.pool_calls_converted_export = pool_calls(converted, x, export_branch=True)
    census_disagrees = _census_disagreement(case)
    if census_disagrees:
        raise CaseFailed(census_disagrees)
    bound = EAGER_TOLERANCE["float32"] * max(1.0, case.output_scale)
    if case.eager_max_error > bound:
        raise CaseFailed(f"eager error {case.eager_max_error:.3g} over {bound:.3g} (1e-4 x the output's scale)")
    if case.device != "cpu" or tuple(dtypes) != ("float32",):
        case.eager_errors = eager_errors(model, x, case.device, dtypes)
        over = {d: e for d, e in case.eager_errors.items() if e > EAGER_TOLERANCE[d]}
        if over:
            raise CaseFailed(f"eager error over tolerance on {case.device}: {over}")
    return converted, report


def _check_torchscript(
    case: Case,
    original: _Original,
    converted: torch.nn.Module,
    report: fxpool.ConversionReport,
    casedir: str,
    stock: str,
    notes: list[str],
) -> None:
    """Plain TorchScript export of the converted model, verified in onnxruntime (against the stock export
    at ``stock`` where it runs); fxpool.export where that fails or a pool was left."""
    path = _export_path(casedir, case.model, "ts")
    case.converted_torchscript = "fails: not verified"
    try:
        _plain_onnx_export(converted, original.x, path, dynamo=False)
    except Exception as error:
        reason = exporter_reason(error)
        case.converted_torchscript = f"fails: {reason}"
        case.details.append(f"plain TorchScript export of the converted model: {error}")
        if case.stock_torchscript == case.converted_torchscript:
            # The exporter stops at an op that is not a pool, in the original as in ours.
            notes.append(
                f"the TorchScript exporter fails on the original and the converted model alike ({reason}); "
                "TorchScript export not checked"
            )
            return
        case.fxpool_torchscript = _fxpool_export(original, casedir, dynamo=False, details=case.details)
        if case.fxpool_torchscript == "ok":
            raise CaseFailed(
                f"plain TorchScript export of the converted model fails ({reason}) where fxpool.export succeeds"
            ) from error
        raise
    case.torchscript_ort_error = _verified(path, original, stock if case.stock_torchscript == "ok" else None, notes)
    case.converted_torchscript = "ok"
    if not report.stands_alone:
        case.fxpool_torchscript = _fxpool_export(original, casedir, dynamo=False, details=case.details)


def _check_dynamo(
    case: Case, original: _Original, converted: torch.nn.Module, report: fxpool.ConversionReport, casedir: str, notes: list[str]
) -> None:
    """The stock dynamo export of the original, the plain dynamo export of the converted model verified,
    and their onnxruntime times; fxpool.export where the plain export fails or a pool was left."""
    model, x = original.model, original.x
    graphs = {}
    stock = _export_path(casedir, case.model, "orig_dynamo")
    stock_error = None
    try:
        torch.onnx.export(model, (x,), stock, dynamo=True, verbose=False)
        case.original_dynamo_ops = op_histogram(stock)
        graphs["original"] = stock
        case.stock_dynamo = "ok" + _decomposition(case.original_dynamo_ops)
    except Exception as error:
        stock_error = error
        case.stock_dynamo = f"fails: {exporter_reason(error)}"
        case.details.append(f"dynamo export of the original: {error}")
        notes.append(f"dynamo export of the original fails ({exporter_reason(error)})")
    path = _export_path(casedir, case.model, "dynamo")
    try:
        _plain_onnx_export(converted, x, path, dynamo=True)
    except Exception as error:
        reason = exporter_reason(error)
        case.details.append(f"plain dynamo export of the converted model: {error}")
        if _torch_export_cannot_capture(error, stock_error):
            case.converted_dynamo = "fails: torch.export cannot capture the model (the original neither)"
            notes.append(
                "torch.export cannot capture this model, the original no more than the converted one; dynamo export not checked"
            )
            return
        if stock_error is not None and reason == exporter_reason(stock_error):
            # The exporter stops at an op that is not a pool, in the original as in ours.
            case.converted_dynamo = f"fails: {reason} (the original alike)"
            notes.append(
                f"the dynamo exporter fails on the original and the converted model alike ({reason}); dynamo export not checked"
            )
            return
        case.converted_dynamo = f"fails: {reason}"
        case.fxpool_dynamo = _fxpool_export(original, casedir, dynamo=True, details=case.details)
        if case.fxpool_dynamo == "ok":
            raise CaseFailed(f"plain dynamo export of the converted model fails ({reason}) where fxpool.export succeeds") from error
        raise
    case.converted_ops = op_histogram(path)
    case.converted_dynamo = "fails: not verified"
    case.dynamo_ort_error = _verified(path, original, graphs.get("original"), notes)
    case.converted_dynamo = "ok" + _decomposition(case.converted_ops)
    if not report.stands_alone:
        case.fxpool_dynamo = _fxpool_export(original, casedir, dynamo=True, details=case.details)
    sessions = ort_sessions({"converted": path, "converted_again": path, **graphs}, case.ort_provider)
    if case.ort_provider != "CPUExecutionProvider":
        outputs = sessions["converted"].run(None, {sessions["converted"].get_inputs()[0].name: x.numpy()})
        notes.append(f"onnxruntime {case.ort_provider} error {max_error(outputs, original.expected):.1e}")
    latency = ort_latencies(sessions, x)
    case.ort_ms_converted, case.ort_ms_original_dynamo = latency["converted"], latency.get("original")
    case.ort_noise = latency["converted_again"] / latency["converted"]
    if case.ort_ms_original_dynamo is not None:
        case.ort_speedup = case.ort_ms_original_dynamo / case.ort_ms_converted


def _check_torch_export(case: Case, original: _Original, converted: torch.nn.Module, notes: list[str]) -> None:
    """torch.export.export of the converted model (what ExecuTorch and AOTInductor start from), its program
    run eagerly against the original; a failure counts only where the original's export succeeds."""
    try:
        with _quiet_exporters():
            program = torch.export.export(converted, (original.x,))
    except Exception as error:
        reason = exporter_reason(error)
        case.details.append(f"torch.export of the converted model: {error}")
        try:
            with _quiet_exporters():
                torch.export.export(original.model, (original.x,))
        except Exception as stock_error:
            case.converted_torch_export = f"fails: {reason} (the original alike)"
            notes.append(f"torch.export fails on the original ({exporter_reason(stock_error)}) and the converted model alike")
            return
        case.converted_torch_export = f"fails: {reason}"
        raise CaseFailed(f"torch.export of the converted model fails ({reason}) where the original's succeeds") from error
    leftover = sorted({str(n.target) for n in program.graph.nodes if n.op == "call_function" and "adaptive" in str(n.target)})
    with torch.no_grad():
        case.torch_export_error = max_error(program.module()(original.x), original.expected)
    if case.torch_export_error > EAGER_TOLERANCE["float32"] * max(1.0, case.output_scale or 0.0):
        case.converted_torch_export = "fails: not exact"
        raise CaseFailed(f"the converted model's torch.export program differs from the original by {case.torch_export_error:.3g}")
    case.converted_torch_export = "ok" + (f": {', '.join(leftover)}" if leftover else "")


def _check_pt2(case: Case, original: _Original, notes: list[str]) -> None:
    """PT2 in, PT2 out: the original's torch.export program converted as a program, the new program run against the
    original; not tried where the original does not torch.export."""
    try:
        with _quiet_exporters():
            program = torch.export.export(original.model, (original.x,))
    except Exception as error:
        notes.append(f"PT2 not tried: the original does not torch.export ({exporter_reason(error)})")
        return
    try:
        with _quiet_exporters():
            converted = fxpool.convert(program)
    except Exception as error:
        case.pt2 = f"fails: {exporter_reason(error)}"
        case.details.append(f"fxpool.convert of the original's torch.export program: {traceback.format_exc()}")
        raise CaseFailed(f"fxpool.convert of the original's torch.export program fails ({exporter_reason(error)})") from error
    report = fxpool.report_of(converted)
    case.pt2_pools, case.pt2_converted = len(report.records), len(report.converted)
    with torch.no_grad():
        case.pt2_error = max_error(converted.module()(original.x), original.expected)
    if case.pt2_error > EAGER_TOLERANCE["float32"] * max(1.0, case.output_scale or 0.0):
        case.pt2 = "fails: not exact"
        raise CaseFailed(f"the converted PT2 program differs from the original by {case.pt2_error:.3g}")
    if report.unconverted:
        case.pt2 = f"fails: {len(report.unconverted)} pool(s) left"
        raise CaseFailed("the converted PT2 program leaves " + "; ".join(f"{r.location}: {r.reason}" for r in report.unconverted))
    case.pt2 = "ok"


def _plain_onnx_export(model: torch.nn.Module, x: torch.Tensor, path: str, dynamo: bool) -> None:
    """``torch.onnx.export`` as a user calls it after converting: nothing of fxpool's around the call."""
    torch.onnx.export(model, (x,), path, dynamo=dynamo, verbose=False)


def _fxpool_export(original: _Original, casedir: str, dynamo: bool, details: list[str]) -> str:
    """What fxpool.export (conversion, translations, verification) makes of the original: "ok" or why not."""
    path = _export_path(casedir, original.model.__class__.__name__, "fxpool_dynamo" if dynamo else "fxpool_ts")
    try:
        fxpool.export(original.model, original.x, path, dynamo=dynamo, rtol=ONNX_RTOL, atol=ONNX_ATOL)
    except Exception as error:
        details.append(f"fxpool.export ({'dynamo' if dynamo else 'TorchScript'}): {error}")
        return f"fails: {exporter_reason(error)}"
    return "ok"


def _decomposition(ops: dict[str, int]) -> str:
    decomposed = [op for op in DECOMPOSITION_OPS if op in ops]
    return f": {', '.join(decomposed)}" if decomposed else ""


@contextlib.contextmanager
def _quiet_exporters():
    import logging

    loggers = [logging.getLogger(name) for name in ("torch.export", "torch._export", "torch.fx.experimental.symbolic_shapes")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _census_disagreement(case: Case) -> str:
    """Why the pools the models call and the pools the report lists disagree ("" when they agree).

    The report has one record per pool (a module object, one size of a module called at several, a
    functional call of a module's forward), each with the number of calls the conversion saw of it; the census counts calls at run
    time, so the two must be equal, and the converted model must make exactly the calls of the pools
    the report leaves to PyTorch. With torch.onnx.is_in_onnx_export() true, the converted model may
    call no pool but those left: the branch the ONNX exporters take is converted too."""
    called, left = sum(case.pool_calls.values()), sum(case.pool_calls_converted.values())
    if called != case.reported_calls:
        return f"the original calls {called} adaptive pools ({case.pool_calls}) but the report accounts for {case.reported_calls}"
    if left != case.reported_calls_left:
        return (
            f"the converted model still calls {left} adaptive pools ({case.pool_calls_converted}) but the "
            f"report leaves {case.reported_calls_left} calls to PyTorch"
        )
    left_export = sum(case.pool_calls_converted_export.values())
    if left_export > case.unconverted:
        return (
            f"with torch.onnx.is_in_onnx_export() true, the converted model still calls {left_export} adaptive pools "
            f"({case.pool_calls_converted_export}) but the report leaves {case.unconverted} to PyTorch"
        )
    return ""


def pool_speeds(report: fxpool.ConversionReport, workdir: str) -> list[dict[str, Any]]:
    """onnxruntime time of each distinct non-trivial pool alone: fxpool's graph and the stock dynamo graph."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in report.converted:
        kind = record.kind
        if kind in TRIVIAL_REPLACEMENTS or record.input_shape is None or record.output_shape is None:
            continue
        family = record.family
        dims = len(record.input_shape) - 2
        output = tuple(record.output_shape[-dims:])
        key = (family, record.input_shape, output)
        if key in rows or dims not in (2, 3):
            continue
        row = onnx_case(family, record.input_shape, output, POOL_TIMING_REPEATS, workdir)
        rows[key] = {
            "pool": f"{family} {'x'.join(map(str, record.input_shape[1:]))}->{'x'.join(map(str, output))}",
            "replacement": kind,
            "ort_ms_fxpool": row["ort_fxpool"] * 1e3,
            "ort_ms_stock": row["ort_dynamo_original"] * 1e3 if "ort_dynamo_original" in row else None,
            "stock": row.get("dynamo_original_error", "ok"),
        }
    return list(rows.values())


def _export_path(casedir: str, name: str, label: str) -> str:
    # One folder per export: models over 2 GB write their weights as external data files beside it.
    folder = os.path.join(casedir, label)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{name.replace('/', '_').replace(':', '_')}.onnx")


def eager_errors(model: torch.nn.Module, x: torch.Tensor, device: str, dtypes: Sequence[str]) -> dict[str, float]:
    """Per dtype, the converted model against the original, both on ``device``."""
    errors = {}
    for dtype in dtypes:
        original = copy.deepcopy(model).to(device=device, dtype=DTYPES[dtype])
        example = x.to(device=device, dtype=DTYPES[dtype])
        converted = fxpool.convert(original, example)
        with torch.no_grad():
            got, want = converted(example), original(example)
        errors[dtype] = max_error(got, want, relative=dtype != "float32")
    return errors


def output_scale(outputs: Any) -> float:
    """The largest magnitude over the tensor outputs (finite values)."""
    scales = [
        t.detach().double().abs().nan_to_num(posinf=0.0).max().item()
        for t in tree_leaves(outputs)
        if isinstance(t, torch.Tensor) and t.numel() and t.is_floating_point()
    ]
    return max(scales, default=0.0)


def max_error(got: Any, want: Any, relative: bool = False) -> float:
    """Largest |got - want| over all tensor outputs (over the largest |want| when ``relative``)."""
    pairs = [
        (torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(tree_leaves(got), tree_leaves(want)) if isinstance(b, torch.Tensor)
    ]
    worst = 0.0
    for a, b in pairs:
        if a.shape != b.shape:
            raise AssertionError(f"output shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
        if b.numel():
            a, b = a.double().cpu(), b.double().cpu()
            error = (a - b).abs().max().item()
            worst = max(worst, error / max(b.abs().max().item(), 1e-30) if relative else error)
    return worst


def _verified(path: str, original: _Original, reference: str | None, notes: list[str]) -> float:
    """onnxruntime's max error against PyTorch, after ``fxpool.verify_onnx``'s checks.

    Where onnxruntime and PyTorch disagree and the stock export of the original (``reference``)
    disagrees with PyTorch as well, the graph passes if onnxruntime gives the same outputs for it
    as for the stock graph: detection heads with random weights produce tied scores, which the two
    runtimes order differently, with or without fxpool.
    """
    x = original.x
    try:
        return verify_onnx(path, original.model, (x,), rtol=ONNX_RTOL, atol=ONNX_ATOL).max_abs_error
    except ExportVerificationError:
        if reference is None:
            raise
        failed = path + ".failed"
        ours, stock = run_onnxruntime(failed, (x,)), run_onnxruntime(reference, (x,))
        gap = max_error(ours, [torch.from_numpy(a) for a in stock])
        if gap > STOCK_AGREEMENT * max(1.0, max(float(abs(a).max()) for a in stock if a.size)):
            raise
        os.replace(failed, path)
        error = max_error(ours, original.expected)
        notes.append(
            f"onnxruntime differs from PyTorch (up to {error:.3g}) as it does on the stock export of the "
            f"original ({max_error(stock, original.expected):.3g}); fxpool's graph agrees with that one to "
            f"{gap:.1e}"
        )
        return error


def _torch_export_cannot_capture(ours: Exception, original: Exception | None) -> bool:
    """Both exports stopped in the exporter's first step (torch.export capturing the model), which
    fails on models such as torchvision's two-stage detectors with or without fxpool."""
    return original is not None and all(type(e).__name__ == "TorchExportError" for e in (ours, original))


def _stock_torchscript(original: _Original, path: str, details: list[str]) -> str:
    try:
        torch.onnx.export(original.model, (original.x,), path, dynamo=False)
        return "ok"
    except Exception as error:
        details.append(f"stock TorchScript export of the original: {error}")
        return f"fails: {exporter_reason(error)}"


def case_from_record(record: dict[str, Any]) -> Case:
    """A case back from its JSON record (fields a newer or older sweep wrote and this one lacks are dropped)."""
    names = {f.name for f in fields(Case)}
    return Case(**{k: v for k, v in record.items() if k in names} | {"input_shape": tuple(record["input_shape"])})


def finished_case(job: plan.Job, finished: Finished) -> Case:
    """The case a worker left, or a failed case that says what stopped it (the signal, the limit)."""
    if finished.record is not None:
        case = case_from_record(finished.record)
    else:
        case = Case(job.model, job.input_shape, "fail", finished.why_not, device=job.device, suite=suite_of(job.model))
        case.stopped = (finished.exits[-1].limit or finished.exits[-1].signal) if finished.exits else "lost"
    if finished.record is not None and len(finished.exits) > 1:
        note = f"the first worker process died of {finished.exits[0].signal}; the second ran the case"
        case.reason = "; ".join(filter(None, [case.reason, note]))
    case.attempts = len(finished.exits) or 1
    case.worker_seconds = sum(e.seconds for e in finished.exits) or None
    if case.peak_memory_mb is None and finished.exits:
        case.peak_memory_mb = max(e.peak_memory_bytes for e in finished.exits) / 2**20 or None
    case.host = finished.host
    return case


REPORT_EVERY_S = 10.0  # report.json and report.md are rewritten at most this often during a run (the journal at once)
DEFAULT_TIME_LIMIT_S = 1800
DEFAULT_MEMORY_LIMIT_GIB = 8.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxpool zoo", description="model-zoo sweep (torchvision, timm, smp, transformers, monai, thirdparty, pytorchcv)"
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=None,
        help="names as in report.md: alexnet, timm/resnet18:catavgmax, smp/PSPNet-resnet18 "
        f"(default: {' '.join(default_names(SUITES))})",
    )
    parser.add_argument(
        "--suite",
        nargs="+",
        choices=[*SUITES, "all"],
        default=["all"],
        help="which suites' models to sweep (all: those installed); default all",
    )
    parser.add_argument(
        "--sizes",
        nargs="*",
        type=int,
        default=None,
        help="square input sizes (cubes for MONAI; default: torchvision 160 320, timm, transformers and pytorchcv the model's "
        "own and a second, smp 320 512, MONAI two uneven volumes; video models and a few slow ones keep their own shape)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every model of the suites' sweeps (torchvision: each with an adaptive pool, also at its own "
        "default size; timm, pytorchcv and transformers: one per family; smp: every decoder on two encoders; MONAI: every "
        "network module with a pool)",
    )
    parser.add_argument(
        "--every-model",
        action="store_true",
        help="every model the suites' libraries register (every timm architecture, every pytorchcv model, every "
        "transformers vision model type, torchvision's whole registry); those without an adaptive pool are reported "
        "as skips without running (model_zoo_checks/registry.json)",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="sweep N of the chosen models that run, spread evenly over them (every k-th): a slice that stands for the "
        "whole, to time it (the models reported without running are left out)",
    )
    parser.add_argument(
        "--max-params",
        type=float,
        default=None,
        metavar="M",
        help="leave out the models of more than M million parameters (registry census): a slice that runs in minutes",
    )
    parser.add_argument(
        "--one-size",
        action="store_true",
        help="each model at the first of its sizes only (timm, transformers and pytorchcv: the model's own)",
    )
    parser.add_argument("--list", action="store_true", help="print the chosen models, one a line, and run nothing")
    parser.add_argument(
        "--exporters",
        nargs="*",
        default=list(EXPORTERS),
        choices=EXPORTERS,
        help="the plain exports of the converted model to check, and pt2: the original's torch.export program "
        "converted as a program (default: all four)",
    )
    add_device_options(parser, "cpu or cuda: where the eager checks run (in --dtypes)")
    parser.add_argument("--report", default="reports/zoo", help="folder for report.md/json, zoo.svg/png and logs/")
    parser.add_argument(
        "--resume", action="store_true", help="keep every case REPORT's last run finished (its cases.jsonl), run the rest"
    )
    parser.add_argument("--rerun-failures", action="store_true", help="with --resume: run the failed cases again too")
    parser.add_argument(
        "--backend",
        choices=["ray", "processes"],
        default="ray" if backends.ray_available() else "processes",
        help="who runs the cases: Ray (the default where it is installed: pip install -e '.[ray]') or local worker processes",
    )
    parser.add_argument(
        "--address", default=None, help="a Ray cluster to send the cases to (default: RAY_ADDRESS, else a local Ray instance)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="cases at a time on this machine (default: its cores / --threads, one on a GPU); a cluster runs as many as "
        "it has cores",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (and Ray CPUs) per case (default 1)")
    parser.add_argument(
        "--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help=f"seconds per case (default {DEFAULT_TIME_LIMIT_S})"
    )
    parser.add_argument(
        "--memory-limit",
        type=float,
        default=DEFAULT_MEMORY_LIMIT_GIB,
        help=f"GiB of resident memory per case (default {DEFAULT_MEMORY_LIMIT_GIB:g})",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the exporters' own output on the console instead of in REPORT/logs/"
    )
    return parser


def _names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The models the options ask for."""
    if args.models:
        return list(args.models)
    suites = [s for s in SUITES if installed(s)] if "all" in args.suite else list(dict.fromkeys(args.suite))
    for suite in suites:
        if not installed(suite):
            parser.error(f"--suite {suite}: the package is not installed; pip install -e '.[{suite}]'")
    if args.every_model:
        return every_name(suites)
    return swept_names(suites) if args.all else default_names(suites)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    device, dtypes = device_and_dtypes(parser, args)
    if args.threads < 1 or (args.workers is not None and args.workers < 1):
        parser.error("--threads and --workers take a whole number of at least 1")
    if args.backend == "ray" and not backends.ray_available():
        parser.error("--backend ray: Ray is not installed; pip install -e '.[ray]', or --backend processes")
    names = _names(parser, args)
    reasons = plan.unswept(names, args.every_model)
    if args.max_params is not None:
        names = [n for n in names if n in reasons or registry.entry(n).params <= args.max_params * 1e6]
    if args.sample:
        runnable = [n for n in names if n not in reasons]
        names = runnable[:: max(1, len(runnable) // args.sample)][: args.sample]
    if args.list:
        print("\n".join(names))
        return 0
    settings = {"exporters": tuple(args.exporters), "device": device, "dtypes": dtypes, "threads": args.threads}
    default_set = not (args.all or args.every_model or args.models or args.sizes)  # one shape for its slowest models
    laid_out = plan.jobs(names, args.sizes, args.all or args.every_model, settings, DEFAULT_SHAPES if default_set else None)
    if args.one_size:
        first: dict[str, plan.Job] = {}
        for job in laid_out:
            first.setdefault(job.model, job)
        laid_out = list(first.values())
    folder = Path(args.report)
    kept = journal.read(folder) if args.resume else []
    if args.rerun_failures:
        kept = [record for record in kept if record["status"] != "fail"]
    journal.begin(folder, kept)  # every case it had stays in the journal; this run's report holds this run's cases
    order = {job.key: k for k, job in enumerate(laid_out)}
    cases = {journal.key(record): case_from_record(record) for record in kept if journal.key(record) in order}
    for job in laid_out:
        if job.model in reasons and job.key not in cases:
            cases[job.key] = Case(job.model, job.input_shape, "skip", reasons[job.model], device, suite_of(job.model))
            journal.append(folder, asdict(cases[job.key]))
    todo = plan.longest_first([job for job in laid_out if job.key not in cases], cost)

    def in_order() -> list[Case]:
        return sorted(cases.values(), key=lambda c: order[(c.model, c.input_shape)])

    # One case at a time on a GPU (each worker would hold a CUDA context of its own); on the CPU a case per core.
    workers = args.workers or (1 if device != "cpu" else max(1, (os.cpu_count() or 1) // args.threads))
    limits = Limits(args.time_limit, int(args.memory_limit * 2**30))
    results: Iterator[tuple[plan.Job, Finished]] = iter(())  # nothing to run: no backend to start
    worker = isolation.WORKER  # read here, in the driver, and handed to the tasks (the tests give a stand-in)
    if todo and args.backend == "ray":
        cpus = args.workers and args.workers * args.threads
        results = backends.ray_results(todo, limits, args.address, cpus, args.verbose, worker)
    elif todo:
        results = backends.process_results(todo, limits, workers, args.verbose, worker)
    print(
        f"fxpool zoo: {len(laid_out)} cases, {len(laid_out) - len(todo)} kept or reported without running, "
        f"{len(todo)} to run on {args.backend}" + (f" ({workers} at a time)" if args.backend == "processes" else ""),
        file=sys.stderr,
    )
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is optional
        tqdm = None
    stop_as_before = signal.signal(signal.SIGTERM, _interrupt)  # a scheduler's stop: record what finished, stop the workers
    progress = tqdm(total=len(todo), unit="case", file=sys.stderr, dynamic_ncols=True) if tqdm else None
    written = time.monotonic()
    interrupted = False
    try:
        for job, finished in results:
            case = finished_case(job, finished)
            log = Path("logs") / plan.log_name(job.label)
            if not args.verbose:
                (folder / log).parent.mkdir(parents=True, exist_ok=True)
                (folder / log).write_text(finished.log)
                case.log = str(log)
            cases[job.key] = case
            journal.append(folder, asdict(case))
            if case.status == "fail":
                line = f"FAIL {job.label}: {case.reason[:200]}" + (f" (log: {folder / case.log})" if case.log else "")
                (progress.write(line, file=sys.stderr) if progress else print(line, file=sys.stderr))
            if progress:
                progress.update()
                progress.set_postfix(counts(list(cases.values())))
            if time.monotonic() - written > REPORT_EVERY_S:
                write_reports(in_order(), folder, picture=False)
                written = time.monotonic()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, stop_as_before)
        if progress:
            progress.close()
    finished_cases = in_order()
    write_reports(finished_cases, folder)
    print(summary(finished_cases))
    print(
        f"reports in {folder}/: report.md (every case), report.json, cases.jsonl (as they finished), compatibility.csv, "
        f"zoo.svg and zoo.png; per-case exporter output in {folder}/logs/"
        + ("; interrupted: --resume runs the rest" if interrupted else "")
    )
    if interrupted:
        return 130
    return 0 if all(c.status != "fail" for c in finished_cases) else 1


if __name__ == "__main__":
    sys.exit(main())
