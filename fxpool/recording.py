"""One side-effect-free forward pass (a copy with cloned buffers) that records every adaptive pool call with its
sizes: hooks on every module keep a stack of the modules running; a ``TorchFunctionMode`` sees functional calls."""

from __future__ import annotations

import contextlib
import inspect
import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .calls import PoolCall, describe_function, describe_module, is_pool_function
from .copying import structural_copy, tree_index
from .errors import ExampleInputError, FxpoolError, PoolCallError, error_summary
from .example import Example, example_run
from .globalstate import export_flag
from .steps import PoolFamily

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep  # with the separator: torchvision is not torch
_FXPOOL_DIR = os.path.dirname(__file__) + os.sep

Scope = tuple[str, ...]


@dataclass(frozen=True)
class PoolEvent:
    """One adaptive pool call seen in the recording forward pass."""

    call: PoolCall
    module_name: str | None  # the pool module's qualified name; None for functional calls
    scope: Scope  # the qualified name of each module running, outermost first
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    quantized: bool
    source: str | None = None
    already_converted: str | None = None  # one of fxpool's replacements (a converted model again): what it computes

    @property
    def spatial_dims(self) -> int:
        return self.call.spatial_dims or len(self.input_shape) - 2

    @property
    def innermost(self) -> str:
        """The qualified name of the module whose forward made the call."""
        return self.scope[-1]


@dataclass
class Recording:
    """What the forward pass saw."""

    events: list[PoolEvent] = field(default_factory=list)
    output: Any = None  # the model's output on the example, detached, for the self-check
    export_branch: Recording | None = None  # the run with torch.onnx.is_in_onnx_export() true, where the model asked
    asks_export_flag: bool = False  # the model asked torch.onnx.is_in_onnx_export() in this run


def record_pool_calls(model: nn.Module, example: Example) -> Recording:
    """Run the model once on ``example`` without side effects and record every adaptive pool call (none inside
    TorchScript submodules); a model that asks ``torch.onnx.is_in_onnx_export()`` again with the answer true."""
    recording = _record(model, example, export=False)
    if recording.asks_export_flag:
        with contextlib.suppress(FxpoolError):  # a branch that cannot run is no branch to prove
            recording.export_branch = _record(model, example, export=True)
    return recording


def _record(model: nn.Module, example: Example, export: bool) -> Recording:
    probe = structural_copy(model, clone_buffers=True)
    modules, names = tree_index(probe)
    scripted = {id(m) for module in probe.modules() if isinstance(module, torch.jit.ScriptModule) for m in module.modules()}
    recording = Recording()
    stack: list[str] = []
    in_pool_module: list[bool] = []  # parallel to stack: is that module an adaptive pool?
    # Pool modules and fxpool's own replacements found again (with what they compute), by id.
    pools: dict[int, tuple[PoolCall, str | None]] = {}
    for module in modules:
        try:
            call = describe_module(module)
        except PoolCallError as error:
            raise PoolCallError(f"{names[id(module)][0] or '<root>'}: {error}") from None
        if (found := (call, None) if call is not None else already_converted(module)) is not None:
            pools[id(module)] = found

    def pre_hook(module: nn.Module, inputs: tuple[Any, ...]) -> None:
        stack.append(_path_in_context(names.get(id(module), ["?"]), stack[-1] if stack else None))
        in_pool_module.append(id(module) in pools)
        call, already = pools.get(id(module), (None, None))
        if call is not None and already is None:
            _validate_input(call, inputs[0] if inputs else None, names[id(module)][0] or "<root>")

    def post_hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if not stack:
            return
        if id(module) in pools:
            call, already = pools[id(module)]
            _add_event(recording, call, stack[-1], tuple(stack), inputs[0] if inputs else None, output, None, already)
        stack.pop()
        in_pool_module.pop()

    class PoolCallRecorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            # Every other op of the model as fast as the mode allows, and a pool module's own call.
            if not is_pool_function(func) or (in_pool_module and in_pool_module[-1]):
                return func(*args, **kwargs)
            try:
                described = describe_function(func, args, kwargs)
            except PoolCallError as error:
                raise PoolCallError(f"{error} (at {_caller_source()})") from None
            if described is None:
                return func(*args, **kwargs)
            call, value = described
            source = _caller_source()
            _validate_input(call, value, source)
            output = func(*args, **kwargs)
            _add_event(recording, call, None, tuple(stack) or ("",), value, output, source)
            return output

    with ExitStack() as cleanup:
        for module in modules:
            if id(module) in scripted:
                continue
            cleanup.enter_context(module.register_forward_pre_hook(pre_hook))
            cleanup.enter_context(module.register_forward_hook(post_hook, always_call=True))
        cleanup.enter_context(example_run(example))
        flag = cleanup.enter_context(export_flag(export))
        cleanup.enter_context(PoolCallRecorder())
        try:
            recording.output = tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, example.call(probe))
        except FxpoolError:
            raise
        except Exception as error:  # the model's own failure, reported with the example's shapes
            if export:
                raise ExampleInputError(
                    f"with torch.onnx.is_in_onnx_export() true, {type(model).__name__}.forward raised {error_summary(error)}"
                ) from error
            hint = _KEYWORD_HINT if example.kwargs and isinstance(error, TypeError) else ""
            raise ExampleInputError(
                f"{type(model).__name__}.forward raised {type(error).__name__} on the example input "
                f"{example.describe()}: {str(error).rstrip('.')}. Nothing was converted; pass an example input the "
                f"model accepts (the one you would give torch.onnx.export).{hint}"
            ) from error
        recording.asks_export_flag = flag.count > 0
    return recording


def _path_in_context(paths: list[str], caller: str | None) -> str:
    """Which of a module's qualified names this call goes by: the one under the calling module (a module held
    by two parents has two names, and the calls from the second must not be filed under the first)."""
    if len(paths) == 1 or caller is None:
        return paths[0]
    prefix = caller + "." if caller else ""
    direct = [p for p in paths if p.rpartition(".")[0] == caller]
    below = [p for p in paths if p.startswith(prefix)]
    return (direct or below or paths)[0]


def _validate_input(call: PoolCall, value: Any, where: str | None) -> None:
    place = f"{call.op} at {where}" if where else call.op
    if not isinstance(value, torch.Tensor):
        raise PoolCallError(f"{place}: input must be a tensor, got {type(value).__name__}")
    if value.is_quantized:
        return
    if not value.is_floating_point():
        raise PoolCallError(
            f"{place}: input has dtype {value.dtype} (shape {tuple(value.shape)}); adaptive pooling "
            f"needs a real floating tensor (not integer or complex). Give the model a floating example input, or cast "
            f"before the pool."
        )
    dims = call.spatial_dims
    if dims is not None and value.dim() not in (dims + 1, dims + 2):
        raise PoolCallError(
            f"{place}: input of shape {tuple(value.shape)} has rank {value.dim()}, but a {dims}d pool takes "
            f"rank {dims + 1} (unbatched) or {dims + 2} (batched); check the example input's shape"
        )


def already_converted(module: nn.Module) -> tuple[PoolCall, str] | None:
    """The pool one of fxpool's replacement modules stands for, and what computes it; None for other modules."""
    reference = getattr(type(module), "fxpool_native_reference", None)
    if reference is None or not type(module).__module__.startswith("fxpool."):
        return None
    native: tuple[PoolFamily, tuple[int | None, ...]] = module.fxpool_native_reference  # type: ignore[assignment]
    family, out_sizes = native
    indices = getattr(module, "returns_indices", False)
    call = PoolCall(family, len(out_sizes), f"fxpool.{type(module).__name__}", "module", tuple(out_sizes), indices)
    plan = getattr(module, "plan", None)
    what = plan.describe() if plan is not None else module.extra_repr()
    return call, f"already converted ({what})"


def _add_event(
    recording: Recording,
    call: PoolCall,
    module_name: str | None,
    scope: Scope,
    value: Any,
    output: Any,
    source: str | None,
    already: str | None = None,
) -> None:
    values = output[0] if isinstance(output, (tuple, list)) else output
    if not isinstance(value, torch.Tensor) or not isinstance(values, torch.Tensor):
        return
    shapes = tuple(value.shape), tuple(values.shape)
    event = PoolEvent(call, module_name, scope, *shapes, value.dtype, value.device, value.is_quantized, source, already)
    recording.events.append(event)


def _caller_source() -> str | None:
    frame = inspect.currentframe()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_TORCH_DIR) or filename.startswith(_FXPOOL_DIR) or filename.startswith("<")):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


_KEYWORD_HINT = (
    " The dict at the end of the example was read as keyword arguments, as torch.onnx.export reads it; "
    "to pass a dict positionally, end the tuple with an empty dict: (batch, {})."
)
