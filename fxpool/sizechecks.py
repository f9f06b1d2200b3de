"""Where a replacement runs (:func:`plain_eager`), and the size checks it makes there: one specialised to the
example's spatial size never computes at another, in eager and while an exporter traces (:func:`check_input`), nor
in what ``torch.jit.trace`` and the TorchScript ONNX exporter record (:func:`traced_guard`)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .errors import PoolCallError, SpatialSizeError


@torch.fx.wrap
def check_input(x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
    """Return ``x`` if it is floating and its trailing spatial sizes match ``expected`` (``None``: any), in eager and
    while a tracer runs; a spatial size left symbolic by ``torch.export`` (a dynamic axis) cannot be checked: refused."""
    # Eager, and torch.compile (its guards on the sizes hold at run time); not torch.export, where ONNX drops them
    if type(x) is torch.Tensor and not torch.jit.is_tracing() and not torch.compiler.is_exporting() and x.is_floating_point():
        spatial_sizes = x.shape[-len(expected) :]
        if (
            len(spatial_sizes) == len(expected)
            and 0 not in spatial_sizes
            and all(e is None or e == s for e, s in zip(expected, spatial_sizes))
        ):
            return x
    if isinstance(x, torch.Tensor) and not x.is_floating_point():
        raise PoolCallError(
            f"{pool_at(location)}: input has dtype {x.dtype}; adaptive pooling needs a real floating tensor, as the "
            f"original pool does. Cast the input to a floating type."
        )
    shape = tuple(static_size(s) for s in x.shape)
    spatial = shape[len(shape) - len(expected) :]
    if any(_known(s == 0) for s in spatial):
        raise PoolCallError(
            f"{pool_at(location)}: input of shape {shape} has an empty spatial axis; adaptive pooling needs non-zero "
            f"spatial sizes, as the original pool does."
        )
    if not any(e is not None for e in expected):
        return x
    traced = tuple("*" if e is None else e for e in expected)
    if any(e is not None and not (_known(s == e) or _known(s != e)) for e, s in zip(expected, spatial)):
        raise SpatialSizeError(
            f"{pool_at(location)}: this replacement was specialised for spatial size {traced}, but it is being "
            f"exported with a dynamic spatial size ({shape}); the graph would be wrong at other sizes. {_KEEP_STATIC}"
        )
    if len(shape) < len(expected) or any(e is not None and not _known(s == e) for e, s in zip(expected, spatial)):
        raise SpatialSizeError(
            f"{pool_at(location)}: this replacement was specialised for spatial size {traced} but got input of "
            f"shape {shape} (spatial {spatial}). Convert again with an example input of this "
            f"size (fxpool.convert(model, example)), or convert with dynamic=True for one model "
            f"that serves every size."
        )
    return x


_KEEP_STATIC = (
    "Keep spatial axes static, or convert with dynamic=True (fxpool.convert(model, example, dynamic=True), "
    "fxpool.export(..., dynamic=True), fxpool.onnx_export_hook(dynamic=True)) for one graph exact at every size."
)


def _known(condition: Any) -> bool:
    """``condition`` (about sizes) holds whatever a symbolic size turns out to be. Under ``torch.export`` without
    adding a guard (a constraint on the dynamic dimension, or a runtime assertion ONNX drops); elsewhere sizes are
    ints, or torch.compile's SymInts, whose guards hold at run time."""
    if not torch.compiler.is_exporting():
        return bool(condition)
    # Only tracers that make symbolic sizes reach here, and they have imported it (sympy; 0.5 s otherwise).
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(condition))


def pool_at(location: str) -> str:
    """The pool as a user finds it: ``location`` is its module path (``features.3``, ``1``) or ``scope:node``."""
    return f"the adaptive pool at {location!r} of the converted model"


def static_size(size: object) -> Any:
    """A size as a Python int where one is known; torch.jit.trace hands sizes out as 0-d tensors."""
    if isinstance(size, torch.Tensor):
        with warnings.catch_warnings():  # the int feeds checks and lookups, never the traced graph
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return int(size)
    return size


def traced_size(size: object) -> int | None:
    """A size's value at the size traced, where the graph may keep it symbolic: a SymInt's example value (read
    without a guard), a 0-d tensor's value under torch.jit.trace; None where unknown (a torch.fx Proxy)."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return None if hint is None else int(hint)
    size = static_size(size)
    return size if isinstance(size, int) else None


def traced_sizes(sizes: Any) -> tuple[int, ...] | None:
    """Each of ``sizes`` at the size traced (:func:`traced_size`); None where one is unknown."""
    known = tuple(size for size in map(traced_size, sizes) if size is not None)
    return known if len(known) == len(sizes) else None


_SCRIPTED_CHECK: list[Any] = []


def traced_size_check(x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
    """``x`` through a TorchScript function ``torch.jit.trace`` keeps: the traced module raises at another spatial size."""
    if not _SCRIPTED_CHECK:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script's deprecation: this is its one use
            _SCRIPTED_CHECK.append(torch.jit.script(_check_sizes_scripted))
    return _SCRIPTED_CHECK[0](x, [-1 if e is None else e for e in expected], location)


def _check_sizes_scripted(x: torch.Tensor, expected: list[int], location: str) -> torch.Tensor:
    spatial = x.shape[x.dim() - len(expected) :]
    for axis in range(len(expected)):
        if expected[axis] >= 0 and spatial[axis] != expected[axis]:
            traced = ", ".join([("*" if e < 0 else str(e)) for e in expected])
            raise ValueError(
                f"fxpool: the adaptive pool at '{location}' of the converted model was traced for spatial size ({traced}) "
                f"but got input of shape {list(x.shape)}. Trace or export at this size, or convert with dynamic=True "
                f"for one graph exact at every size."
            )
    return x


def traced_guard(x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
    """The size check a tracer records for a replacement made for ``expected`` sizes: under the TorchScript
    ONNX exporter :func:`onnx_size_guard` (an empty input refused first), under ``torch.jit.trace`` alone
    :func:`traced_size_check`; elsewhere ``x`` as it is."""
    if not torch.jit.is_tracing():
        return x
    if torch.onnx.is_in_onnx_export():
        refuse_empty_torchscript_export(x, location)
        return onnx_size_guard(x, expected, location) if any(e is not None for e in expected) else x
    return traced_size_check(x, expected, location) if any(e is not None for e in expected) else x


def refuse_empty_torchscript_export(x: torch.Tensor, location: str) -> None:
    """Raise `PoolCallError` for an empty input under the TorchScript ONNX exporter, whose Reshape symbolic
    divides by the element count and kills the process (the stock export of a native pool refuses it too)."""
    shape = tuple(static_size(s) for s in x.shape)
    if 0 in shape:
        raise PoolCallError(
            f"{pool_at(location)}: the TorchScript ONNX exporter cannot take an input of shape {shape} (an empty "
            f"axis: its Reshape shape inference divides by zero and crashes the process). Export with a batch of 1 "
            f"and a dynamic batch axis (dynamic_axes={{'input': {{0: 'batch'}}}}): the graph runs empty batches too; "
            f"or use the dynamo exporter (dynamo=True), which takes it."
        )


def onnx_size_guard(x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
    """``x``, checked at export (:class:`_SpatialSizeCheck`) and guarded in the graph for the TorchScript ONNX
    exporter: reshaped to its own shape with the guarded spatial sizes as constants, a Reshape that fails at another
    element count. It rides on the data path, where no runtime optimizer can drop it (onnxruntime folds away a
    check on the side)."""
    x = _SpatialSizeCheck.apply(x, expected, location)
    dims = len(expected)
    sizes = [x.shape[axis - dims] if size is None else size for axis, size in enumerate(expected)]
    return x.reshape(tuple(x.shape[: x.dim() - dims]) + tuple(sizes))


class _SpatialSizeCheck(torch.autograd.Function):
    """The identity while the TorchScript exporter traces; its ONNX translation (``symbolic``) refuses a
    pool input whose guarded spatial sizes shape inference finds dynamic, and emits nothing."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, expected: tuple[int | None, ...], location: str) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def symbolic(g: Any, x: Any, expected: tuple[int | None, ...], location: str) -> Any:
        from torch.onnx import symbolic_helper

        sizes = symbolic_helper._get_tensor_sizes(x)
        if sizes is None or len(sizes) < len(expected):
            return x  # nothing known here: the Reshape after it guards at run time
        spatial = sizes[len(sizes) - len(expected) :]
        unknown = [axis for axis, (e, s) in enumerate(zip(expected, spatial)) if e is not None and s is None]
        # A size shape inference lost is no dynamic axis: refuse only where an input's non-batch axis is dynamic
        inputs = [symbolic_helper._get_tensor_sizes(value) for value in g.graph.inputs()]
        freed = any(None in (shape or [])[1:] for shape in inputs)
        if unknown and freed:
            traced = tuple("*" if e is None else e for e in expected)
            shape = tuple("?" if s is None else s for s in sizes)
            raise SpatialSizeError(
                f"{pool_at(location)}: this replacement was specialised for spatial size {traced}, but the ONNX export "
                f"makes its input's spatial size dynamic ({shape}: dynamic_axes); the graph would be wrong at other "
                f"sizes. {_KEEP_STATIC}"
            )
        return x


_TRACED_FORMS = threading.local()


@contextmanager
def traced_forms() -> Iterator[None]:
    """Within the block (this thread), replacements run in eager what tracers see, not PyTorch's kernels: for a
    census of the ops a converted model runs (the zoo's), or to time the exported form in eager."""
    saved = getattr(_TRACED_FORMS, "on", False)
    _TRACED_FORMS.on = True
    try:
        yield
    finally:
        _TRACED_FORMS.on = saved


def in_onnx_export() -> bool:
    """``torch.onnx.is_in_onnx_export()``, also where dynamo traces (strict ``torch.export``, ``torch.cond``'s
    branches), which answers False for that function: there the dynamo ONNX exporter's own flag is read."""
    if torch.compiler.is_dynamo_compiling():
        from torch.onnx._internal.exporter import _flags

        return bool(_flags._is_onnx_exporting)
    return torch.onnx.is_in_onnx_export()


def exporting_for_torch_runtimes() -> bool:
    """torch.export for a PyTorch runtime (ExecuTorch, AOTInductor), not on its way to ONNX."""
    return torch.compiler.is_exporting() and not in_onnx_export()


def plain_eager() -> bool:
    """Nothing traces, compiles or exports, and no traced_forms block is open (cheapest question first)."""
    return (
        torch._C._get_tracing_state() is None
        and not getattr(_TRACED_FORMS, "on", False)
        and not torch.compiler.is_compiling()
        and not torch.onnx.is_in_onnx_export()
    )
