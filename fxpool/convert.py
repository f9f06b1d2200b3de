"""``convert`` and ``explain``: the one pipeline (record, find, decide, build, check, undo, prove).

Copy, find and build belong to the front end (:class:`FrontEnd`: the module tree's, or :mod:`fxpool.programs`'), the
rest is shared. What the self-check refuses is undone and the pipeline runs again on a fresh copy."""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, overload

import torch
from torch import nn
from torch.export import ExportedProgram

from .building import Built, build
from .checking import Noise, SelfCheck, rounding_noise, self_check
from .copying import structural_copy
from .deciding import SiteDecision, decide
from .errors import SelfCheckError, UnconvertedPoolError, UnconvertedPoolWarning, UnsupportedModelError
from .example import Example, read_example
from .finding import FoundPools, find_pools
from .globalstate import LOCK
from .programs import (
    GRAPH_SCOPE,
    PROGRAM_SCOPE,
    find_graph_pools,
    graph_copy,
    has_aten_pools,
    program_example,
    program_pools,
    put_in_graph,
    reexport,
)
from .proving import proven, traced_pools
from .recording import Recording, record_pool_calls
from .report import ConversionReport, attach_report

# A failed self-check's round undoes at least one replacement and runs again: this bounds only pathological models.
MAX_CHECK_ROUNDS = 16
_UNRUN = (
    "self-check: the example's run never reached this replacement (PyTorch's pool ran in its place), so it was undone; "
    "please report this model"
)

log = logging.getLogger("fxpool")  # what convert decides: DEBUG one record per pool, INFO the outcome


@overload
def convert(
    model: ExportedProgram,
    example_input: Any = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    dynamic: bool = False,
) -> ExportedProgram: ...


@overload
def convert(
    model: nn.Module,
    example_input: Any = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    dynamic: bool = False,
) -> nn.Module: ...


def convert(
    model: nn.Module | ExportedProgram,
    example_input: Any = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    dynamic: bool = False,
) -> nn.Module | ExportedProgram:
    """Return a model that computes the same function with every adaptive pool replaced exactly.

    ``example_input`` and ``example_kwargs`` are read as ``torch.onnx.export`` reads ``args`` and ``kwargs``: a tuple
    of positional arguments or any other single argument (a tensor, a list of images); without ``example_kwargs``, a
    dict ending the tuple holds the keyword arguments, so a model taking a dict positionally is given ``(batch, {})``.
    Replacements are specialised to the spatial sizes this input produces and raise
    :class:`~fxpool.errors.SpatialSizeError` on other sizes, unless ``dynamic=True``, under which every pool computes
    its windows from the size it is given.

    The converted model is run once on the example and compared with the original (the report's ``check``); what
    disagrees is undone. The caller's model is never changed. The result shares its parameters and buffers (the same
    tensors, no copy) and copies only the module objects; :func:`~fxpool.report.report_of` gives its
    :class:`~fxpool.report.ConversionReport`. With ``strict=True`` any pool that would be left to PyTorch raises
    :class:`~fxpool.errors.UnconvertedPoolError`, and a self-check that did not pass at once raises
    :class:`~fxpool.errors.SelfCheckError`.

    Examples:
        >>> import torch, torchvision
        >>> from fxpool import report_of
        >>> converted = convert(torchvision.models.vgg11(weights=None), torch.randn(1, 3, 160, 160))
        >>> print(report_of(converted).records[0].replacement)
        sliding H 5->7 (k=1,2) -> sliding W 5->7 (k=1,2)
        >>> report_of(converted).check.status
        'passed'

    A ``torch.export`` program (``ExportedProgram``, its example input optional) gives a new program with every ATen
    adaptive pool replaced, and a ``GraphModule`` calling the ATen pool operators (``program.module()``) a rewritten
    copy: see :mod:`fxpool.programs`."""
    if isinstance(model, ExportedProgram) or has_aten_pools(model):
        converted, report = _convert_program(model, example_input, example_kwargs, dynamic)
    elif example_input is None:
        raise TypeError(
            "fxpool.convert(model, example_input): an nn.Module needs its example input (only a torch.export program "
            "carries its own)"
        )
    else:
        converted, report = _convert(model, read_example(example_input, example_kwargs), dynamic)
    if strict:
        enforce_strict(report, for_export=False)
    else:
        warn_left(report, for_export=False)
    attach_report(converted, report)
    return converted


def enforce_strict(report: ConversionReport, *, for_export: bool) -> None:
    """What ``strict=True`` refuses: pools left to PyTorch (``for_export``: those the export leaves to the stock
    exporter; average pools are lowered exactly there), and a self-check that did not pass at once."""
    left = report.unexportable if for_export else report.unconverted
    if left:
        translated = len(report.unconverted) - len(report.unexportable)
        note = (
            ""
            if for_export or not translated
            else f"\n{translated} of them are average pools that fxpool.export and onnx_export_hook lower exactly at "
            f"export time, so strict=True there accepts them; here strict asks for every pool replaced in eager."
        )
        what = "the export would leave to the stock exporter" if for_export else "would be left to PyTorch"
        raise UnconvertedPoolError(
            f"strict=True and {len(left)} adaptive pool(s) {what}:\n" + ConversionReport(left).table() + note
        )
    if report.check is not None and (report.check.actions or report.check.status not in ("passed", "skipped")):
        raise SelfCheckError(f"strict=True and the self-check did not pass at once: {report.check.summary()}")


def warn_left(report: ConversionReport, *, for_export: bool, stacklevel: int = 3) -> None:
    """Where ``strict=True`` raises (`enforce_strict`), a non-strict call warns (`UnconvertedPoolWarning`)."""
    left = report.unexportable if for_export else report.unconverted
    undone = report.check.actions if report.check is not None else ()
    if not left and not undone:
        return
    parts = []
    if left:
        where = "; ".join(f"{r.location}: {r.reason}" for r in left[:3]) + (f"; and {len(left) - 3} more" if len(left) > 3 else "")
        what = "the export leaves to the stock exporter" if for_export else "are left to PyTorch"
        parts.append(f"{len(left)} adaptive pool(s) {what} ({where})")
    if undone:  # a replacement undone is a pool left, said above; a trace undone is said here
        first = "" if left else f" ({undone[0]}{' ...' if len(undone) > 1 else ''})"
        parts.append(f"the self-check undid {len(undone)} step(s){first}")
    warnings.warn(
        "fxpool: " + "; ".join(parts) + ". fxpool.report_of(converted) has every record; strict=True makes this an error.",
        UnconvertedPoolWarning,
        stacklevel=stacklevel,
    )


def _log_decisions(report: ConversionReport) -> None:
    for record in report.records:
        what = record.replacement if record.converted else "left to PyTorch"
        log.debug("%s (%s): %s, because %s", record.location, record.op, what, record.reason)
    check = "not run" if report.check is None else report.check.status
    log.info("converted %d of %d adaptive pool(s); self-check %s", len(report.converted), len(report.records), check)


def _convert_program(
    model: Any, example_input: Any, example_kwargs: Mapping[str, Any] | None, dynamic: bool
) -> tuple[Any, ConversionReport]:
    """``convert`` of a torch.export program, or of a GraphModule calling ATen pool operators (fxpool.programs)."""
    example = None if example_input is None else read_example(example_input, example_kwargs)
    if isinstance(model, ExportedProgram):
        return _convert_exported(model, example or program_example(model), dynamic)
    if example is None:
        raise TypeError("fxpool.convert(graph_module, example_input): a GraphModule needs its example input")
    return _convert(model, example, dynamic, _graphs(GRAPH_SCOPE))


def _convert_exported(program: ExportedProgram, example: Example, dynamic: bool) -> tuple[ExportedProgram, ConversionReport]:
    """The pipeline over ``program.module()``, re-exported as a program, run against the original and read for the proof."""
    with LOCK:
        converted, report, reference = _pipeline(program.module(), example, dynamic, _graphs(PROGRAM_SCOPE))
        if not any(r.converted and r.form == "aten" for r in report.records):  # nothing replaced
            result, traced = copy.copy(program), program_pools(program, shapes=False)
        else:
            result = reexport(program, converted, example)
            check = self_check(result.module(), example, reference)
            if check.status != "passed":
                raise SelfCheckError(
                    f"fxpool: the converted program differs from the original on the example {example.describe()} "
                    f"({check.mismatch}), although the rewritten graph matched it; please report it with the program"
                )
            traced = program_pools(result, shapes=True)
            assert report.check is not None
            compared = f"{report.check.compared}, and the re-exported program on the example {example.describe()}"
            report = replace(report, check=replace(report.check, compared=compared))
    report = proven(report, traced)
    _log_decisions(report)
    return result, report


def explain(
    model: nn.Module | ExportedProgram,
    example_input: Any = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    dynamic: bool = False,
) -> ConversionReport:
    """The report ``convert`` would produce (every pool, its replacement and why), without the converted model."""
    if isinstance(model, ExportedProgram) or has_aten_pools(model):
        return _convert_program(model, example_input, example_kwargs, dynamic)[1]
    return _convert(model, read_example(example_input, example_kwargs), dynamic)[1]


@dataclass(frozen=True)
class _Round:
    """One pass of the pipeline over a fresh copy: what it found and decided, the result, and its check."""

    found: FoundPools
    decisions: tuple[SiteDecision, ...]
    converted: nn.Module
    check: SelfCheck


@dataclass(frozen=True)
class FrontEnd:
    """One kind of model: a fresh copy of it, its pool sites there (from the recording), and how to put replacements in place."""

    fresh_copy: Callable[[nn.Module], nn.Module]
    find: Callable[[nn.Module, Recording], FoundPools]
    put_in_place: Callable[[nn.Module, FoundPools, tuple[SiteDecision, ...], torch.device], Built]


MODULES = FrontEnd(structural_copy, find_pools, build)


def _graphs(scope: str) -> FrontEnd:
    """The front end of ATen-level graphs (fxpool.programs): their pool nodes, rewritten in a graph copy."""
    return FrontEnd(graph_copy, functools.partial(find_graph_pools, scope=scope), put_in_graph)


def _convert(model: nn.Module, example: Example, dynamic: bool, front: FrontEnd = MODULES) -> tuple[nn.Module, ConversionReport]:
    """The pipeline, then the proof: what a tracer sees of the result."""
    if isinstance(model, torch.jit.ScriptModule):
        raise UnsupportedModelError(
            f"fxpool.convert got a TorchScript module ({type(model).__name__}); TorchScript code cannot be "
            f"traced or rewritten. Pass the Python nn.Module you scripted (before torch.jit.script/trace), "
            f"and script the converted model if you need TorchScript."
        )
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxpool.convert needs an nn.Module, got {type(model).__name__}")
    if _is_compiled(model):
        raise UnsupportedModelError(
            f"fxpool.convert got a torch.compile'd model (OptimizedModule wrapping {type(model._orig_mod).__name__}); "
            f"compiled code cannot be run op by op to find its pools. Convert the module it wraps, then compile the "
            f"result with your settings: torch.compile(fxpool.convert(model._orig_mod, example), ...)"
        )
    with LOCK:
        converted, report, _ = _pipeline(model, example, dynamic, front)
        if not example.on_meta:  # the claims, from what a tracer sees of the result
            report = proven(report, traced_pools(converted, example))
    _log_decisions(report)
    return converted, report


def _pipeline(model: nn.Module, example: Example, dynamic: bool, front: FrontEnd) -> tuple[nn.Module, ConversionReport, Any]:
    """Record, then find, decide, build and check on fresh copies until the check passes or nothing is left to
    undo; the converted model, its report and the original's output on the example. The caller holds ``LOCK``:
    the example runs fork the global random generators."""
    recording = record_pool_calls(model, example)
    # Where replacement constants go when the example is on the meta device: beside the weights.
    weights = (t.device for t in itertools.chain(model.parameters(), model.buffers()) if t.device.type != "meta")
    fallback_device = next(weights, torch.device("cpu"))
    undo = _Undo()
    first: _Round | None = None
    noise: Noise | None = None  # the original's own, measured once, at the first whole-model mismatch
    for _ in range(MAX_CHECK_ROUNDS):
        applied = tuple(undo.actions)
        work = front.fresh_copy(model)
        found = front.find(work, recording)
        decisions = tuple(decide(site, dynamic=dynamic, undone=undo.replacements.get(site.location)) for site in found.sites)
        built = front.put_in_place(work, found, decisions, fallback_device)
        if built.changed:
            export = recording.export_branch
            check = self_check(built.root, example, recording.output, None if export is None else export.output)
        else:
            check = _unchanged_check(bool(applied), any(site.already is not None for site in found.sites))
        unrun = _unrun(decisions, check) if built.changed and check.status == "passed" else ()
        if unrun and undo.undo(unrun, _UNRUN):
            continue
        result = _Round(found, decisions, built.root, replace(check, actions=applied))
        first = first or result
        if result.check.status != "failed":
            break
        if not result.check.failed_replacements:
            noise = noise or rounding_noise(model, example, recording.output)
            if not noise.deterministic:
                result = replace(first, check=_inconclusive(first.check))
                break
            accepted = result.check.within_noise(noise)
            if accepted is not None:  # the model's own rounding (TF32 downstream, say), not the conversion
                result = replace(result, check=accepted)
                break
        if not undo.learn(result):
            break  # nothing left to undo: the last conversion stands, its check says failed
    report = ConversionReport(tuple(d.record for d in result.decisions), result.found.intercepted, check=result.check)
    return result.converted, report, recording.output


def _is_compiled(model: nn.Module) -> bool:
    """``model`` is a ``torch.compile`` wrapper (``OptimizedModule``). Only a process that has imported
    ``torch._dynamo`` holds one; importing it here would cost a fresh process's first conversion 1-2 s."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return eval_frame is not None and isinstance(model, eval_frame.OptimizedModule)


def _unrun(decisions: tuple[SiteDecision, ...], check: SelfCheck) -> tuple[str, ...]:
    """Replaced sites the recording saw called in eager whose replacement the check never saw run."""
    ran = {c.location for c in check.replacements}
    return tuple(d.site.location for d in decisions if d.replaced and not d.site.export_branch and d.site.location not in ran)


def _unchanged_check(undone: bool, converted_before: bool) -> SelfCheck:
    if undone:
        return SelfCheck(
            "skipped",
            "EVERY replacement was undone after the self-check failed (see undone below), so the model returned is "
            "the original, its pools left to PyTorch",
        )
    if converted_before:
        return SelfCheck("skipped", "nothing new to replace: the model was converted before, and is returned as it is")
    return SelfCheck("skipped", "nothing was replaced, so the model is the original")


def _inconclusive(check: SelfCheck) -> SelfCheck:
    mismatch = (check.mismatch or "") + (
        "; the original itself gives other outputs on a second run of the example (it is not deterministic), "
        "so the comparison cannot decide"
    )
    return replace(check, status="inconclusive", mismatch=mismatch, actions=())


@dataclass
class _Undo:
    """What earlier rounds of the self-check refused: replacements by location."""

    replacements: dict[str, str] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)

    def undo(self, locations: Iterable[str], why: str) -> bool:
        """Undo the replacements at ``locations`` not undone yet, for ``why``; False where there were none."""
        fresh = [location for location in locations if location not in self.replacements]
        for location in fresh:
            self.replacements[location] = why
            self.actions.append(f"{location}: {why}")
        return bool(fresh)

    def learn(self, result: _Round) -> bool:
        """Record what to undo after a failed check; False when nothing is left to undo."""
        check = result.check
        for failed in check.failed_replacements:
            why = (
                f"self-check: this replacement differed from the native pool by {failed.max_error:.3g} "
                f"(allowed {failed.tolerance:.3g}), so it was undone"
            )
            self.undo([failed.location], why)
        if check.failed_replacements:
            return True
        # Nothing pins the mismatch down: undo every replacement left rather than return a conversion known to differ.
        why = (
            f"self-check: the converted model differed from the original ({check.mismatch}) and no "
            f"single replacement could be blamed, so every replacement was undone"
        )
        return self.undo((d.site.location for d in result.decisions if d.replaced), why)
