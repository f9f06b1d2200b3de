"""The example input: read as ``torch.onnx.export`` reads ``args`` and ``kwargs``, called, and run."""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .errors import ExampleInputError


@dataclass(frozen=True, eq=False)
class Example:
    """Positional and keyword arguments of one call of the model."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def call(self, function: Callable[..., Any]) -> Any:
        return function(*self.args, **self.kwargs)

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the example, positional arguments first, in ``torch.onnx``'s flattening order."""
        return [leaf for leaf in tree_leaves((self.args, dict(self.kwargs))) if isinstance(leaf, torch.Tensor)]

    def tensors_in_signature_order(
        self, function: Callable[..., Any], *, defaults_as_inputs: bool = False
    ) -> list[tuple[str, torch.Tensor]]:
        """Each tensor with the name of the parameter it is passed as, in ``function``'s parameter order (as both
        ONNX exporters order keyword arguments; a container's tensors in flattening order under its name). With
        ``defaults_as_inputs``, left-out parameters take their defaults and Python numbers count as 0-d tensors,
        as the TorchScript exporter makes graph inputs of them when keyword arguments are given."""
        try:
            bound = inspect.signature(function).bind(*self.args, **self.kwargs)
        except (TypeError, ValueError):
            return [("", tensor) for tensor in self.tensors()]
        if defaults_as_inputs:
            bound.apply_defaults()
        named: list[tuple[str, torch.Tensor]] = []
        for name, value in bound.arguments.items():
            for leaf in tree_leaves(value):
                if isinstance(leaf, torch.Tensor):
                    named.append((name, leaf))
                elif defaults_as_inputs and isinstance(leaf, (bool, int, float)):  # as the TorchScript exporter makes them
                    dtype = torch.bool if isinstance(leaf, bool) else torch.int64 if isinstance(leaf, int) else torch.float64
                    named.append((name, torch.tensor(leaf, dtype=dtype)))
        return named

    @property
    def on_meta(self) -> bool:
        return any(t.device.type == "meta" for t in self.tensors())

    def describe(self) -> str:
        parts = [_describe(a) for a in self.args] + [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        return "(" + ", ".join(parts) + ")"


def read_example(example_input: Any, kwargs: Mapping[str, Any] | None = None) -> Example:
    """``torch.onnx.export``'s reading of ``args`` and ``kwargs``: a tuple is the positional arguments, anything else
    the one; without ``kwargs``, a dict ending the tuple holds the keyword arguments (``(batch, {})``: positional)."""
    if isinstance(example_input, Example):
        return example_input
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    if kwargs is None and args and isinstance(args[-1], dict):
        args, kwargs = args[:-1], args[-1]
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ExampleInputError(f"the example's keyword arguments must be a dict, got {type(kwargs).__name__}")
    example = Example(tuple(args), dict(kwargs or {}))
    if not example.tensors():
        raise ExampleInputError(
            f"the example input holds no tensor (got {example.describe()}); pass the input you would give the "
            f"model, e.g. torch.randn(1, 3, 224, 224), a tuple of its arguments, or its keyword arguments as a "
            f"dict at the end of the tuple (or as kwargs=), as torch.onnx.export takes them"
        )
    return example


@contextmanager
def example_run(example: Example) -> Iterator[None]:
    """No gradients, and every random generator the model may draw from forked: each run starts from the
    caller's current state (two runs draw the same dropout masks), which is unchanged afterwards."""
    devices = sorted({t.device.index or 0 for t in example.tensors() if t.device.type == "cuda"})
    python_state = random.getstate()
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            yield
    finally:
        random.setstate(python_state)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return type(value).__name__
