"""Recognising adaptive pool calls in every spelling, and normalising their arguments.

A *pool call* is a module of :data:`MODULE_FORMS` (or ``nn.Upsample(mode="area")``), a function of
:data:`FUNCTION_FORMS` with ``output_size`` in any spelling, or an ATen operator of :data:`ATEN_FORMS`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import PoolCallError
from .steps import PoolFamily


@dataclass(frozen=True)
class PoolCall:
    """One adaptive pool as written in the model, before any sizes are known."""

    family: PoolFamily
    spatial_dims: int | None  # None: interpolate's, known only from its input's rank
    op: str
    form: str  # "module", "functional" or "aten" (an operator of a torch.export graph)
    output_size: tuple[int | None, ...] | None  # None: interpolate with scale_factor
    return_indices: bool = False
    dynamic_output_size: bool = False  # output_size is computed in the graph, not a constant

    @property
    def requested(self) -> str:
        """The output size as the model asks for it, for reports."""
        if self.dynamic_output_size:
            return "computed at run time"
        if self.output_size is None:
            return "scale_factor"
        return str(self.output_size[0] if len(self.output_size) == 1 else self.output_size)

    @property
    def asks_for_ones(self) -> bool:
        """Whether the model asks for output size 1 on every axis (a global pool at every input size)."""
        return not self.dynamic_output_size and bool(self.output_size) and all(size == 1 for size in self.output_size or ())


@dataclass(frozen=True)
class _FunctionForm:
    family: PoolFamily
    spatial_dims: int | None
    op: str
    always_indices: bool = False  # returns (values, indices) whatever its arguments say
    accepts_return_indices: bool = False


_ATEN_POOLS: tuple[tuple[str, PoolFamily, int], ...] = (
    ("adaptive_avg_pool1d", "avg", 1),
    ("adaptive_avg_pool2d", "avg", 2),
    ("adaptive_avg_pool3d", "avg", 3),
    ("_adaptive_avg_pool2d", "avg", 2),
    ("_adaptive_avg_pool3d", "avg", 3),
    ("adaptive_max_pool1d", "max", 1),
    ("adaptive_max_pool2d", "max", 2),
    ("adaptive_max_pool3d", "max", 3),
)
# The ATen operators of adaptive pools that torch.export programs hold, before and after run_decompositions
# (which makes the average ones _adaptive_avg_pool2d/3d, and 1d pools 2d). The max ones return (values, indices).
ATEN_FORMS: dict[Any, _FunctionForm] = {
    getattr(torch.ops.aten, name).default: _FunctionForm(family, dims, f"aten.{name}.default", always_indices=family == "max")
    for name, family, dims in _ATEN_POOLS
}
FUNCTION_FORMS: dict[Callable[..., Any], _FunctionForm] = {
    F.adaptive_avg_pool1d: _FunctionForm("avg", 1, "F.adaptive_avg_pool1d"),
    F.adaptive_avg_pool2d: _FunctionForm("avg", 2, "F.adaptive_avg_pool2d"),
    F.adaptive_avg_pool3d: _FunctionForm("avg", 3, "F.adaptive_avg_pool3d"),
    torch._C._nn.adaptive_avg_pool2d: _FunctionForm("avg", 2, "torch._C._nn.adaptive_avg_pool2d"),
    torch._C._nn.adaptive_avg_pool3d: _FunctionForm("avg", 3, "torch._C._nn.adaptive_avg_pool3d"),
    F.adaptive_max_pool1d: _FunctionForm("max", 1, "F.adaptive_max_pool1d", accepts_return_indices=True),
    F.adaptive_max_pool2d: _FunctionForm("max", 2, "F.adaptive_max_pool2d", accepts_return_indices=True),
    F.adaptive_max_pool3d: _FunctionForm("max", 3, "F.adaptive_max_pool3d", accepts_return_indices=True),
    F.adaptive_max_pool1d_with_indices: _FunctionForm("max", 1, "F.adaptive_max_pool1d_with_indices", True),
    F.adaptive_max_pool2d_with_indices: _FunctionForm("max", 2, "F.adaptive_max_pool2d_with_indices", True),
    F.adaptive_max_pool3d_with_indices: _FunctionForm("max", 3, "F.adaptive_max_pool3d_with_indices", True),
    torch.adaptive_max_pool1d: _FunctionForm("max", 1, "torch.adaptive_max_pool1d", True),
    torch._C._nn.adaptive_max_pool2d: _FunctionForm("max", 2, "torch._C._nn.adaptive_max_pool2d", True),
    torch._C._nn.adaptive_max_pool3d: _FunctionForm("max", 3, "torch._C._nn.adaptive_max_pool3d", True),
    F.interpolate: _FunctionForm("avg", None, "F.interpolate(mode='area')"),
}
# The ATen operators called from Python (``torch.ops.aten.adaptive_avg_pool2d.default(x, [5, 3])``, as
# Torch-TensorRT's tests write them), by their packet and their overload: a torch function mode sees both.
for _overload, _form in ATEN_FORMS.items():
    FUNCTION_FORMS[_overload.overloadpacket] = replace(_form, op=f"torch.ops.{_form.op.removesuffix('.default')}")
    FUNCTION_FORMS[_overload] = replace(_form, op=f"torch.ops.{_form.op}")

MODULE_FORMS: tuple[tuple[type[nn.Module], PoolFamily, int], ...] = (
    (nn.AdaptiveAvgPool1d, "avg", 1),
    (nn.AdaptiveAvgPool2d, "avg", 2),
    (nn.AdaptiveAvgPool3d, "avg", 3),
    (nn.AdaptiveMaxPool1d, "max", 1),
    (nn.AdaptiveMaxPool2d, "max", 2),
    (nn.AdaptiveMaxPool3d, "max", 3),
)
POOL_CLASS_NAMES = frozenset(cls.__name__ for cls, _, _ in MODULE_FORMS)


def _lookup(table: dict[Any, _FunctionForm], target: Any) -> _FunctionForm | None:
    try:
        return table.get(target)
    except TypeError:  # unhashable
        return None


def describe_aten(target: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[PoolCall, Any] | None:
    """The pool call an ATen operator makes and its input, or ``None`` if it is no pool. ``return_indices`` is left
    ``False``: whether the graph uses the indices the max operators return is the graph's to say."""
    form = _lookup(ATEN_FORMS, target)
    if form is None:
        return None
    dims = form.spatial_dims
    assert dims is not None
    values = {**dict(zip(("input", "output_size"), args)), **kwargs}
    size = values.get("output_size")
    sizes = normalize_output_size(size, dims, form.op) if size is not None and _is_constant_size(size) else None
    call = PoolCall(form.family, dims, form.op, "aten", sizes, dynamic_output_size=sizes is None)
    return call, values.get("input", values.get("self"))


def aten_returns_indices(target: Any) -> bool:
    """True for the ATen max pools, whose result is ``(values, indices)``."""
    form = _lookup(ATEN_FORMS, target)
    return form is not None and form.always_indices


def is_pool_function(func: Any) -> bool:
    """True for every function spelling of an adaptive pool (interpolate counts; check its mode)."""
    return _lookup(FUNCTION_FORMS, func) is not None


def normalize_output_size(output_size: Any, spatial_dims: int, where: str) -> tuple[int | None, ...]:
    """``output_size`` as a tuple of one entry per spatial axis; raises on malformed sizes."""
    if isinstance(output_size, (int, torch.SymInt)) and not isinstance(output_size, bool):
        sizes: tuple[Any, ...] = (output_size,) * spatial_dims
    elif isinstance(output_size, (tuple, list, torch.Size)):
        sizes = tuple(output_size)
        if len(sizes) == 1 and spatial_dims > 1:
            sizes = sizes * spatial_dims
    else:
        raise PoolCallError(f"{where}: output_size must be an int or a tuple of ints/None, got {output_size!r}")
    if len(sizes) != spatial_dims:
        raise PoolCallError(
            f"{where}: output_size {output_size!r} has {len(sizes)} entries but the pool has "
            f"{spatial_dims} spatial axes; give one size per axis"
        )
    for size in sizes:
        if size is not None and not _is_int(size):
            raise PoolCallError(f"{where}: output_size entries must be ints or None, got {output_size!r}")
        if size is not None and size < 0:
            raise PoolCallError(f"{where}: output_size {output_size!r} has a negative entry; sizes must be >= 0")
    return sizes


def runs_own_forward(module: nn.Module, cls: type[nn.Module]) -> bool:
    """True when ``module`` computes something else than ``cls.forward``: a subclass overriding it, or
    a ``forward`` set on the instance. Such a module is not a pool: its forward runs like any other module's."""
    return type(module).forward is not cls.forward or "forward" in vars(module)


def describe_module(module: nn.Module) -> PoolCall | None:
    """The pool call a module makes, or ``None`` when it is not an adaptive pool (:func:`runs_own_forward`)."""
    for cls, family, dims in MODULE_FORMS:
        if isinstance(module, cls):
            if runs_own_forward(module, cls):
                return None
            where = f"nn.{cls.__name__}"
            sizes = normalize_output_size(module.output_size, dims, where)
            return PoolCall(family, dims, where, "module", sizes, return_indices=bool(getattr(module, "return_indices", False)))
    if isinstance(module, nn.Upsample) and module.mode == "area" and not runs_own_forward(module, nn.Upsample):
        size = module.size
        return PoolCall("avg", None, "nn.Upsample(mode='area')", "module", None if size is None else _as_tuple(size))
    return None


def _as_tuple(size: Any) -> tuple[int | None, ...]:
    return tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size,)


def describe_function(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[PoolCall, Any] | None:
    """The pool call ``func(*args, **kwargs)`` makes and its input, or ``None``; a non-constant size is ``dynamic_output_size``."""
    form = _lookup(FUNCTION_FORMS, func)
    if form is None:
        return None
    values = _bind(form, args, kwargs)
    if form.spatial_dims is None:
        if values.get("mode") != "area":
            return None
        size = values.get("size")
        dynamic = not _is_constant_size(size)
        call = PoolCall(
            "avg", None, form.op, "functional", None if size is None or dynamic else _as_tuple(size), dynamic_output_size=dynamic
        )
        return call, values.get("input")
    size = values.get("output_size")
    dynamic = not _is_constant_size(size)
    sizes = None if dynamic else normalize_output_size(size, form.spatial_dims, form.op)
    indices = form.always_indices or (not dynamic and form.accepts_return_indices and bool(values.get("return_indices")))
    return PoolCall(form.family, form.spatial_dims, form.op, "functional", sizes, indices, dynamic), values.get("input")


_POOL_PARAMS = ("input", "output_size", "return_indices")
_INTERPOLATE_PARAMS = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")


def _bind(form: _FunctionForm, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = _INTERPOLATE_PARAMS if form.spatial_dims is None else _POOL_PARAMS
    values = {**dict(zip(names, args)), **kwargs}
    if form.spatial_dims is None:
        values.setdefault("mode", "nearest")
    if "input" not in values and "self" in values:
        values["input"] = values["self"]
    for name in ("output_size", "size"):
        if name in values:
            values[name] = _traced_ints(values[name])
    return values


def _traced_ints(size: Any) -> Any:
    """``size`` with 0-d integer tensors as Python ints: ``torch.jit.trace`` hands out ``x.size()`` entries as
    such tensors, so a size a forward reads off its input (``(h, w) = x.size()[2:]``) arrives as them under
    the TorchScript exporter; the trace is specialised to the example's sizes anyway."""
    if isinstance(size, (tuple, list)):
        ints = [v if isinstance(v, (tuple, list)) else _traced_ints(v) for v in size]
        return ints if isinstance(size, list) else tuple(ints)
    if isinstance(size, torch.Tensor) and size.dim() == 0 and not size.is_floating_point() and size.dtype != torch.bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return int(size)
    return size


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_constant_size(size: Any) -> bool:
    if isinstance(size, (tuple, list, torch.Size)):
        return all(s is None or _is_int(s) for s in size)
    return size is None or _is_int(size)
