"""``export`` (convert, ``torch.onnx.export``, verify) and the pieces the pre-export hook shares with it.

Exports run one at a time under `LOCK`: the TorchScript exporter's state and both exporters' flags are process-wide,
so while fxpool exports other threads' ``torch.onnx.export`` calls are routed through the lock (`fxpool.globalstate`);
a race that still happens (a thread holding its own reference to the exporter) is an `ExportFailedError` that says so.
The exporters' log records go to the ``fxpool.exporters`` logger at DEBUG level, not to the console."""

from __future__ import annotations

import ast
import errno
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, TypeVar

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.utils._pytree import tree_leaves

from .convert import convert, enforce_strict, warn_left
from .copying import structural_copy
from .errors import (
    ExportFailedError,
    ExportRequestError,
    ExportVerificationError,
    FxpoolError,
    FxpoolWarning,
    OutputFileError,
    SpatialSizeError,
    UnconvertedPoolWarning,
    UnsupportedOpsetError,
    require,
)
from .example import Example, read_example
from .globalstate import LOCK, exports_routed, unpatched_export, wait_for_exports_in_flight
from .programs import program_example
from .report import ConversionReport, report_of
from .symbolics import dynamo_translation_table, exporter_translations
from .verifying import op_histogram, verify_onnx
from .writing import WrittenFile, staged_output


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` wrote and what it measured."""

    path: str
    report: ConversionReport
    op_histogram: dict[str, int]
    max_abs_error: float | None  # onnxruntime against PyTorch on the example input; None unverified
    max_rel_error: float | None
    verified: str = ""  # what was run where, in words ("" unverified)
    # The ONNX node names each replacement became, by its report location (quantizers' nodes_to_exclude)
    pool_nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    files: tuple[WrittenFile, ...] = ()  # every file written, the graph last (its external data before it)


def export(
    model: nn.Module | ExportedProgram,
    example_input: Any,
    f: str | os.PathLike[str] | BinaryIO,
    *,
    verify: bool = True,
    dynamic: bool = False,
    strict: bool = False,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **kwargs: Any,
) -> ExportResult:
    """Convert ``model`` and export it to ONNX at ``f``; ``kwargs`` go to ``torch.onnx.export``.

    Like ``torch.onnx.export``, the model is exported in eval mode unless ``training`` says otherwise;
    fxpool works on a copy with cloned buffers, so the caller's model, its batch-norm statistics and the
    random state are left exactly as they were. Spatial axes stay static unless every converted pool is
    size-agnostic (a mean, say) or ``dynamic=True``: a shape-specialised graph must not accept another
    size, so ``dynamic_axes``/``dynamic_shapes`` that free a spatial axis are refused then.

    ``example_input`` is ``torch.onnx.export``'s ``args`` and a ``kwargs=`` keyword its ``kwargs``, read
    the same way (a dict ending ``args`` holds the keyword arguments). A ``torch.export`` program
    (``ExportedProgram``) is converted as a program and exported by the dynamo exporter; its example input
    may be ``None`` (its own). `ExportResult.pool_nodes` names the ONNX nodes each replacement became (for
    a quantizer's list of nodes to keep in float, say).

    ``f`` is a path or, as for ``torch.onnx.export``, a binary file object (written as one file, the weights inside).
    A path is checked before any work (`OutputFileError` for a folder or a missing folder), and written atomically:
    the exporter writes beside it under a temporary name, the graph is verified there, and only then moved into place
    with its external data (``NAME.onnx.data``, the dynamo exporter's default); `ExportResult.files` names every file
    written. A graph that fails its check is set aside in the folder ``NAME.onnx.failed`` and the error says so; a
    file that was at ``f`` before is left as it was, after a failure, a full disk or a killed process alike.

    Before any conversion work, the exporter's and the verification's packages are imported (a missing one raises
    `MissingDependencyError` with the ``pip install`` line) and ``opset_version`` is checked against what the chosen
    exporter writes (`UnsupportedOpsetError`; see `supported_opsets`)."""
    check_export_request(kwargs, verify, "fxpool.export")
    if hasattr(f, "write"):  # a file object, as torch.onnx.export takes: one file, exported and verified, then copied
        if kwargs.get("dynamo", True) is not False:
            kwargs.setdefault("external_data", False)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "model.onnx")
            converted, reference, example = _converted(model, example_input, kwargs, verify, dynamic, strict)
            try:
                result = _export_file(converted, reference, example, path, verify, rtol, atol, kwargs)
            except (ExportVerificationError, UnsupportedOpsetError) as error:
                raise type(error)(f"{error} Nothing was written to the file object.") from error
            with open(path, "rb") as written:
                f.write(written.read())
        return replace(result, path=str(getattr(f, "name", "<file object>")))
    # The staging folder is made first: an output that cannot be written is refused before any work.
    with staged_output(f) as staging:
        converted, reference, example = _converted(model, example_input, kwargs, verify, dynamic, strict)
        try:
            result = _export_file(converted, reference, example, staging.path, verify, rtol, atol, kwargs)
        except (ExportVerificationError, UnsupportedOpsetError) as error:
            where = staging.set_aside()
            kept = "left as it was" if staging.target.exists() else "not written"
            raise type(error)(f"{error} The graph was set aside in {where}; {staging.target} was {kept}.") from error
        files = staging.commit()
    return replace(result, path=str(staging.target), files=files)


def _converted(
    model: nn.Module | ExportedProgram, example_input: Any, kwargs: dict[str, Any], verify: bool, dynamic: bool, strict: bool
) -> tuple[nn.Module | ExportedProgram, nn.Module, Example]:
    """The model converted for export, the reference it is verified against (the original, on a copy), the example."""
    if isinstance(model, ExportedProgram):  # converted as a program (its own dynamic dimensions kept)
        if kwargs.get("dynamo", True) is False:
            raise ValueError(
                "a torch.export program exports through the dynamo exporter only (dynamo=True); the TorchScript exporter "
                "takes an nn.Module"
            )
        for option in ("dynamic_shapes", "dynamic_axes", "training"):
            if option in kwargs:
                raise ValueError(f"{option}= does not apply to a torch.export program: it keeps what it was exported with")
        example = program_example(model) if example_input is None else read_example(example_input, kwargs.pop("kwargs", None))
        return convert_for_export(model, example, dynamic, strict), model.module(), example
    example = read_example(example_input, kwargs.pop("kwargs", None))
    mode = kwargs.get("training", torch.onnx.TrainingMode.EVAL)
    train = mode == torch.onnx.TrainingMode.TRAINING or (mode == torch.onnx.TrainingMode.PRESERVE and model.training)
    if train and verify:
        raise ValueError(
            "training=TrainingMode.TRAINING exports the model in train mode, where dropout and "
            "batch statistics make onnxruntime and PyTorch disagree by design; pass verify=False"
        )
    reference = structural_copy(model, clone_buffers=True)
    try:
        reference.train(train)
    except NotImplementedError as error:  # ExportedProgram.module(): torch.export fixed the mode in its graph
        if mode == torch.onnx.TrainingMode.TRAINING:
            raise ValueError(
                f"training=TrainingMode.TRAINING: {type(model).__name__}.train() is not supported ({error}); a module "
                f"from ExportedProgram.module() computes in the mode it was exported in: export the program in train mode"
            ) from error
    converted = convert_for_export(reference, example, dynamic, strict)
    refuse_dynamic_spatial_axes_for(converted, kwargs)
    return converted, reference, example


_Model = TypeVar("_Model", nn.Module, ExportedProgram)


def convert_for_export(model: _Model, example: Example, dynamic: bool, strict: bool) -> _Model:
    """``convert``, judged as the export will be: pools the export lowers exactly are neither refused nor warned of."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconvertedPoolWarning)  # said below, for the pools the export leaves
        converted = convert(model, example, dynamic=dynamic)
    if strict:
        enforce_strict(report_of(converted), for_export=True)
    else:
        warn_left(report_of(converted), for_export=True, stacklevel=4)
    return converted


def _export_file(
    converted: nn.Module | ExportedProgram,
    reference: nn.Module,
    example: Example,
    path: str,
    verify: bool,
    rtol: float,
    atol: float,
    kwargs: dict[str, Any],
) -> ExportResult:
    kwargs.setdefault("verbose", False)  # the dynamo exporter prints its progress unless told not to
    # Keyword arguments as a trailing dict, as both exporters read them (so a last positional dict is not taken for them)
    args = () if isinstance(converted, ExportedProgram) else example.args + (dict(example.kwargs),)
    try:
        with warnings.catch_warnings(), _exporter_logs_to_fxpool(_EXPORTER_LOGGERS):  # the exporters' notices on every call
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
            warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export", category=DeprecationWarning)
            export_with_translations(torch.onnx.export, converted, args, path, **kwargs)
    except FxpoolError:
        raise
    except Exception as error:  # the exporters' errors have no common base class
        written = _write_failure(error)
        if written is not None:
            raise OutputFileError(f"writing {os.path.basename(path)} failed: {written}; nothing was moved into place") from error
        raise ExportFailedError(export_failure(error, report_of(converted))) from error
    try:
        histogram = op_histogram(path)
    except Exception as error:  # a writer that stopped without an error (a C++ stream on a full disk)
        raise OutputFileError(
            f"the exporter's file {os.path.basename(path)} does not read back ({exporter_reason(error)}); was the disk "
            f"full? Nothing was moved into place"
        ) from error
    check_written_opset(path, kwargs.get("opset_version"))
    result = ExportResult(path, report_of(converted), histogram, None, None, pool_nodes=pool_nodes(path, converted))
    if not verify:
        return result
    checked = verify_onnx(path, reference, example, rtol=rtol, atol=atol)
    return replace(result, max_abs_error=checked.max_abs_error, max_rel_error=checked.max_rel_error, verified=checked.how)


def _write_failure(error: BaseException) -> str | None:
    """What went wrong writing the file, where an exporter's error comes from the file system (a full disk, a file
    size limit, a folder that turned read-only), in words; else None."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _WRITE_ERRNOS:
            return f"{seen.strerror or type(seen).__name__} (errno {errno.errorcode.get(seen.errno or 0, seen.errno)})"
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return next((os.strerror(code) for code in _WRITE_ERRNOS if os.strerror(code) in str(error)), None)


_WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES)


def pool_nodes(path: str, converted: nn.Module | ExportedProgram) -> dict[str, tuple[str, ...]]:
    """The nodes of the ONNX graph at ``path`` that each replacement of ``converted`` became, by location: a node
    belongs to the replacement whose module path is the longest prefix of its own (the dynamo exporter's
    ``pkg.torch.onnx.name_scopes`` metadata, the TorchScript exporter's node name ``/features/avgpool/AveragePool``)."""
    import onnx

    if not isinstance(converted, nn.Module):  # a program's nodes carry no module path of a replacement
        return {}
    modules = {name: module.location for name, module in converted.named_modules() if hasattr(module, "fxpool_native_reference")}
    found: dict[str, list[str]] = {}
    for node in onnx.load(path, load_external_data=False).graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), None)
        scope = ast.literal_eval(scopes) if scopes is not None else node.name.split("/")
        parts = [part for part in scope[:-1] if part]
        for end in range(len(parts), 0, -1):
            location = modules.get(".".join(parts[:end]))
            if location is not None:
                found.setdefault(location, []).append(node.name)
                break
    return {location: tuple(names) for location, names in found.items()}


# Loggers the exporters warn through on every successful export ("torchvision is not installed. Skipping ...").
_EXPORTER_LOGGERS = ("torch.onnx", "torch.export", "torch._export", "onnxscript")
# Exporter log lines that say the exporter did other than it was asked: these reach the caller as warnings.
_CHANGES_THE_REQUEST = re.compile(r"operator set version|opset version", re.IGNORECASE)
exporter_log = logging.getLogger("fxpool.exporters")


class _Relay(logging.Handler):
    """Re-logs an exporter's record on ``fxpool.exporters`` at DEBUG; one that changes the request also warns."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        exporter_log.debug("%s: %s: %s", record.name, record.levelname, message)
        if record.levelno >= logging.WARNING and _CHANGES_THE_REQUEST.search(message):
            warnings.warn(f"the exporter ({record.name}) says: {message}", FxpoolWarning, stacklevel=2)


@contextmanager
def _exporter_logs_to_fxpool(names: tuple[str, ...]) -> Iterator[None]:
    """While inside, the named loggers' records go to ``fxpool.exporters`` (DEBUG) instead of their handlers."""
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger.propagate, logger.handlers[:]) for logger in loggers]
    relay = _Relay()
    for logger in loggers:
        logger.propagate = False
        logger.handlers = [relay]
    try:
        yield
    finally:
        for logger, (propagate, handlers) in zip(loggers, saved):
            logger.propagate = propagate
            logger.handlers = handlers


def supported_opsets(dynamo: bool) -> tuple[int, int]:
    """The lowest and highest ONNX opset the exporter writes as asked, with the torch and onnx installed.

    TorchScript: 7 to 20 (torch 2.14; above 20 it writes opset 20's ops under the higher number). Dynamo:
    18 up to the newest the installed onnx knows; below 18 it writes 18 (it only logs that it did).
    """
    if not dynamo:
        from torch.onnx import _constants

        return _constants.ONNX_MIN_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
    import onnx

    try:
        from torch.onnx._internal.exporter._constants import TORCHLIB_OPSET as lowest
    except ImportError:  # a torch that moved it: the value of 2.9 to 2.14
        lowest = 18
    return lowest, onnx.defs.onnx_opset_version()


def check_export_request(kwargs: dict[str, Any], verify: bool, who: str) -> None:
    """Import what an export with these ``torch.onnx.export`` keyword arguments needs, or raise
    `MissingDependencyError` naming the module and the ``pip install`` line; then raise `UnsupportedOpsetError`
    if ``opset_version`` is outside what the chosen exporter writes."""
    dynamo = kwargs.get("dynamo", True) is not False
    asked = "with dynamo=True (the default)" if dynamo else "with dynamo=False"
    require("onnx", f"{who} {asked}")
    if dynamo:
        require("onnxscript", f"{who} {asked}")
        names = [leaf for leaf in tree_leaves((kwargs.get("dynamic_axes"), kwargs.get("dynamic_shapes"))) if isinstance(leaf, str)]
        if clashing := sorted({name for name in names if re.fullmatch(r"s\d+", name)}):
            raise ExportRequestError(
                f"{who}: dynamic axis names {clashing} look like torch.export's own symbols (s0, s1, ...). The dynamo "
                "exporter renames its symbols to the names given one after another, so a shape derived from one axis "
                "can end up named after another, and onnxruntime fails at sizes where the two differ ('Shape mismatch "
                "attempting to re-use buffer'). Name the axes otherwise ('height', 'width'), or export with dynamo=False"
            )
    if verify:
        require("onnxruntime", f"{who} with verify=True (pass verify=False, or --no-verify, to export unverified)")
    opset = kwargs.get("opset_version")
    if opset is None:
        return
    lowest, highest = supported_opsets(dynamo)
    if lowest <= opset <= highest:
        return
    if dynamo:
        other_low, other_high = supported_opsets(False)
        way_out = (
            f"ask for {lowest} to {highest}, or use the TorchScript exporter (dynamo=False, --exporter torchscript), "
            f"which writes opsets {other_low} to {other_high}"
        )
        if opset < lowest:
            way_out += f"; asked for {opset}, the dynamo exporter would write opset {lowest} instead"
    else:
        way_out = f"ask for {lowest} to {highest}, or use the dynamo exporter (dynamo=True), which writes opsets 18 and up"
    exporter = "dynamo" if dynamo else "TorchScript"
    raise UnsupportedOpsetError(f"opset_version={opset}: the {exporter} exporter writes opsets {lowest} to {highest}; {way_out}")


def check_written_opset(path: str, requested: int | None) -> None:
    """Raise `UnsupportedOpsetError` if the graph at ``path`` is not of the opset asked for (the caller sets it aside)."""
    if requested is None:
        return
    import onnx

    opsets = onnx.load(path, load_external_data=False).opset_import
    written = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), None)
    if written is not None and written != requested:
        raise UnsupportedOpsetError(
            f"opset_version={requested}: the exporter wrote opset {written} instead; ask for opset {written}, or another exporter"
        )


def exporter_reason(error: BaseException) -> str:
    """What an exporter's error says, in one line: its innermost cause's first line, colours removed (the
    dynamo exporter wraps the reason, which names the op it could not handle, under generic texts)."""
    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(root)).strip()
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    line = line.split("  [Caused by")[0].strip()
    return f"{type(root).__name__}: {line}" if line else type(root).__name__


def export_failure(error: BaseException, report: ConversionReport) -> str:
    """Why an export of a converted model failed: the exporter's own reason, and the report."""
    reason = exporter_reason(error)
    if report.unexportable:
        return (
            f"torch.onnx.export failed ({reason}). fxpool left {len(report.unexportable)} adaptive pool(s) to the stock "
            f"exporter, marked (!) below with why; that is the likely cause.\n{report}"
        )
    return (
        f"torch.onnx.export failed ({reason}). fxpool converted or lowers every adaptive pool, so the cause lies elsewhere "
        f"in the model; the exporter's full error is chained to this one (the CLI shows it with --debug).\n{report.summary()}"
    )


def refuse_dynamic_spatial_axes_for(converted: nn.Module, kwargs: dict[str, Any]) -> None:
    """Raise `SpatialSizeError` if ``kwargs`` free a spatial axis that a converted pool of ``converted`` is specialised to."""
    specialised = [r.location for r in report_of(converted).converted if not r.size_agnostic]
    if not specialised:
        return
    where = ", ".join(specialised[:3]) + (f" and {len(specialised) - 3} more" if len(specialised) > 3 else "")
    message = (
        "{what} makes spatial axis {axis} of input {name!r} dynamic, but the converted graph is "
        f"specialised to the example's size ({where}) and would compute wrong results at others; "
        "convert with dynamic=True (fxpool.export(..., dynamic=True), onnx_export_hook(dynamic=True)) "
        "for a graph exact at every size, or keep spatial axes static"
    )
    for name, axes in (kwargs.get("dynamic_axes") or {}).items():
        for axis in axes.keys() if isinstance(axes, dict) else axes:
            if axis >= 2 or axis < 0:
                raise SpatialSizeError(message.format(what="dynamic_axes", axis=axis, name=name))
    shapes = kwargs.get("dynamic_shapes") or {}
    entries = shapes.values() if isinstance(shapes, dict) else shapes
    for index, spec in enumerate(entries):
        items = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
        for axis, value in items:
            if value is not None and (int(axis) >= 2 or int(axis) < 0):
                raise SpatialSizeError(message.format(what="dynamic_shapes", axis=axis, name=index))


class _Exported(nn.Module):
    """A plain wrapper: the TorchScript exporter takes a GraphModule's ``.graph`` for a ScriptModule's. It runs
    the GraphModule's own ``forward``: the exporter maps keyword arguments onto ``forward``'s signature."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.__dict__["forward"] = model.forward


def export_with_translations(export_fn: Any, model: Any, args: Any, f: Any, *rest: Any, **kwargs: Any) -> Any:
    """``export_fn(model, args, f, ...)`` with fxpool's exporter translations registered: the TorchScript
    exporter's as symbolics, the dynamo exporter's in ``custom_translation_table`` (the caller's own entries win)."""
    if kwargs.get("dynamo", True) is False:
        if isinstance(model, torch.fx.GraphModule):
            model = _Exported(model)
    else:
        kwargs["custom_translation_table"] = {**dynamo_translation_table(), **(kwargs.get("custom_translation_table") or {})}
    export_fn = unpatched_export(export_fn)  # torch.onnx.export while patched: the exporter itself
    with LOCK, exports_routed(), exporter_translations():
        wait_for_exports_in_flight()
        try:
            return export_fn(model, args, f, *rest, **kwargs)
        except AssertionError as error:
            if "in_onnx_export" not in str(error):
                raise
            raise ExportFailedError(
                f"torch.onnx.export failed ({exporter_reason(error)}): another thread ran torch.onnx.export at the same "
                f"time, and the TorchScript exporter keeps its state in process-wide globals. fxpool runs its own exports "
                f"and the hook's one at a time, and routes other threads' torch.onnx.export calls through the same lock "
                f"while it exports, but a call another thread entered through a reference of its own "
                f"(from torch.onnx import export) races with it: export one model at a time, or retry"
            ) from error
