"""Pool calls replaced at run time, without a trace: functional calls by a torch function mode, and a pool
module called at several sizes by a table of its replacements (:class:`PoolCalls`, by call and size).

A module whose forward makes a pool call gets a table (the non-persistent submodule ``fxpool_calls``, so ``.to()``
moves the replacements and ``state_dict`` keys stay the original's) and an :class:`InterceptingForward`: its forward
runs as written under a ``TorchFunctionMode`` that answers each pool call with the replacement for the call and the
input's size. The mode is Python, so every tracer that runs the forward sees the replacement's plain ops; each torch
call in the forward pays one Python call."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .calls import PoolCall, describe_function, is_pool_function
from .errors import PoolCallError, SpatialSizeError
from .recording import _FXPOOL_DIR, _TORCH_DIR
from .sizechecks import static_size

CALLS_ATTRIBUTE = "fxpool_calls"  # the submodule holding the table of a module whose forward is intercepted

CallKey = tuple[PoolCall, tuple[int, ...] | None]  # the call as written, and the input's spatial size (None: any)


class PoolCalls(nn.Module):
    """The replacements of pool calls, by the call as written and the input's spatial size (``None``: the dynamic
    form, every size); a key mapped to ``None`` is a call left to PyTorch. ``owner`` names the module in errors.
    As a module, the table stands for the pool module ``call`` it replaced, called at several sizes."""

    def __init__(self, owner: str, call: PoolCall | None = None) -> None:
        super().__init__()
        self.owner = owner
        self.call = call
        self.replacements = nn.ModuleDict()
        self.index: dict[CallKey, str | None] = {}  # key -> name in replacements (None: left to PyTorch)
        self.sizes: dict[PoolCall, list[tuple[int, ...] | None]] = {}  # call -> the sizes it was converted for
        # Eager's shortcut: (function, output size argument, input shape) -> name, filled by each call it served.
        self.seen: dict[tuple[Any, Any, torch.Size], str | None] = {}

    def add(self, call: PoolCall, size: tuple[int, ...] | None, replacement: nn.Module | None) -> None:
        """Hold ``replacement`` for ``call`` at spatial ``size`` (None: every size; a replacement of None: left)."""
        if (call, size) in self.index:
            return
        name = None
        if replacement is not None:
            name = str(len(self.replacements))
            self.replacements[name] = replacement
        self.index[(call, size)] = name
        self.sizes.setdefault(call, []).append(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.call is not None, "a table of functional calls is run by its owner's forward"
        name = self._resolve(self.call, x) if self.call in self.sizes else None
        if name is None:  # pragma: no cover
            raise SpatialSizeError(f"{self.call.op}: no replacement for input of shape {tuple(x.shape)}")
        return self.replacements[name](x)

    def intercept(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A pool call ``func(*args, **kwargs)`` made in the owner's forward: its replacement, or the call itself.

        The common eager spelling, ``func(x, output_size)``, is looked up by its arguments once it has
        been served (a dict lookup); every other call is read by :func:`~fxpool.calls.describe_function`."""
        plain = not kwargs and len(args) == 2 and type(args[0]) is torch.Tensor and torch._C._get_tracing_state() is None
        plain = plain and not torch.compiler.is_compiling()
        if plain:
            try:
                name = self.seen[(func, args[1], args[0].shape)]
            except (KeyError, TypeError):  # not served yet, or an unhashable size (a list)
                pass
            else:
                return func(*args) if name is None else self.replacements._modules[name](args[0])
        try:
            described = describe_function(func, args, kwargs)
        except PoolCallError:  # arguments PyTorch will refuse with its own message
            described = None
        if described is None:  # interpolate in another mode
            return func(*args, **kwargs)
        call, x = described
        if call not in self.sizes:
            return func(*args, **kwargs)
        name = self._resolve(call, x)
        if plain:
            try:
                self.seen[(func, args[1], args[0].shape)] = name
            except TypeError:
                pass
        return func(*args, **kwargs) if name is None else self.replacements[name](x)

    def _resolve(self, call: PoolCall, x: Any) -> str | None:
        """The name of the replacement for ``call`` on ``x`` (None: left to PyTorch); raises at a size it lacks."""
        sizes = self.sizes[call]
        if not isinstance(x, torch.Tensor):  # a torch.fx Proxy: no size to look up; one entry is the call's
            return self.index[(call, sizes[0])] if len(sizes) == 1 else None
        if (call, None) in self.index:
            return self.index[(call, None)]
        dims = call.spatial_dims if call.spatial_dims is not None else x.dim() - 2
        spatial = tuple(int(static_size(s)) for s in x.shape[x.dim() - dims :])
        if (call, spatial) not in self.index:
            raise SpatialSizeError(
                f"{self.owner}: {call.op} (output size {call.requested}) was converted for input spatial size(s) "
                f"{', '.join(str(s) for s in sizes)}, but got input of shape {tuple(int(static_size(s)) for s in x.shape)}. "
                f"Convert again with an example input of this size (fxpool.convert(model, example)), or convert "
                f"with dynamic=True for one model that serves every size."
            )
        return self.index[(call, spatial)]

    def extra_repr(self) -> str:
        return f"owner={self.owner!r}, calls={len(self.index)}"


class _InterceptPoolCalls(TorchFunctionMode):
    """Runs each pool call the table holds as its replacement; every other call as it is."""

    def __init__(self, calls: PoolCalls) -> None:
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not is_pool_function(func) or _called_by_fxpool():  # every other op: one call, as fast as a mode allows
            return func(*args, **(kwargs or {}))
        return self.calls.intercept(func, args, kwargs or {})


class InterceptingForward:
    """The forward of a module whose functional pool calls run their replacements: ``function`` (the class's
    forward, or one set on the instance) bound to ``owner``, under the mode for ``calls``. A plain object, so the
    module pickles and deep-copies; it takes the wrapped forward's signature and code, which exporters read."""

    def __init__(self, owner: nn.Module, calls: PoolCalls) -> None:
        inner = owner.__dict__.get("forward")
        if isinstance(inner, InterceptingForward):
            inner = inner.wrapped
        self.function: Callable[..., Any]
        self.owner: nn.Module | None
        if isinstance(inner, types.MethodType) and isinstance(inner.__self__, nn.Module):
            self.function, self.owner = inner.__func__, inner.__self__
        elif inner is not None:  # some other callable set on the instance
            self.function, self.owner = inner, None
        else:
            self.function, self.owner = type(owner).forward, owner
        self.calls = calls
        self.__signature__ = inspect.signature(self.wrapped)
        self._mode: _InterceptPoolCalls | None = None

    @property
    def wrapped(self) -> Callable[..., Any]:
        """The forward this one runs, bound to its module."""
        return self.function if self.owner is None else types.MethodType(self.function, self.owner)

    @property
    def __code__(self) -> types.CodeType:  # torch.export reads the forward's code for its source locations
        return getattr(self.function, "__code__", InterceptingForward.__call__.__code__)

    def map_modules(self, fn: Callable[[nn.Module], nn.Module]) -> InterceptingForward:
        """This forward for a copy of its module: ``fn`` maps each module to its copy."""
        new = object.__new__(InterceptingForward)
        new.__dict__.update(self.__dict__)
        new.owner = None if self.owner is None else fn(self.owner)
        new.calls = fn(self.calls)  # type: ignore[assignment]
        new._mode = None
        return new

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mode": None}  # the mode is made again on the first call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._mode is None:
            self._mode = _InterceptPoolCalls(self.calls)
        with self._mode:
            if self.owner is None:
                return self.function(*args, **kwargs)
            return self.function(self.owner, *args, **kwargs)


def intercept(owner: nn.Module, calls: PoolCalls) -> None:
    """Make ``owner`` run its forward with ``calls`` intercepted (``owner`` is a copy fxpool owns)."""
    owner._modules[CALLS_ATTRIBUTE] = calls
    owner.__dict__["forward"] = InterceptingForward(owner, calls)


def _called_by_fxpool() -> bool:
    """Whether the pool call comes from fxpool's own code: a replacement running PyTorch's kernel in eager,
    or the self-check's reference. Those are never intercepted (a module below the intercepted forward
    may be a replacement of a pool at another size than a call of the forward's own)."""
    if torch.compiler.is_compiling():  # compiled code has no frames to read; replacements run their plain ops
        return False
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        frame = frame.f_back  # type: ignore[assignment]
    return frame is not None and frame.f_code.co_filename.startswith(_FXPOOL_DIR)
