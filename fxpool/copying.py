"""Copies of a module tree over the same tensors, so fxpool can rewire modules without touching the caller's.

A module is part of the tree wherever its parent holds it: registered, or in a plain attribute, list, tuple or dict
(transformers' UperNet calls its pyramid through a list). Those references, methods bound to a module of the tree and
objects with ``map_modules(fn)`` (an intercepted forward) point into the copy, never at the original."""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

# Every per-module hook attribute of nn.Module, forward and backward, state-dict hooks included.
HOOK_DICTS = tuple(name for name in vars(nn.Module()) if "hook" in name)
# The hooks that change what a call computes or observes (state-dict hooks do not).
CALL_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")

# Attributes of nn.Module that are its own machinery, never a user's module references.
_MACHINERY = frozenset(("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "forward", *HOOK_DICTS))
# How deep nested lists, tuples and dicts are searched for modules, and how long one may be (numbers are no modules).
_MAX_NESTING = 3
_MAX_CONTAINER = 4096


def structural_copy(module: nn.Module, *, clone_buffers: bool = False) -> nn.Module:
    """A copy of ``module``'s tree of module objects over the same parameters (and buffers)."""
    return _copy(module, clone_buffers, {})


def shallow_module_copy(module: nn.Module) -> nn.Module:
    """A new object of the module's class with the same attribute values. Not ``copy.copy``, whose ``__reduce_ex__``
    parametrized modules (weight_norm, ``torch.nn.utils.parametrize``) refuse, except for classes with their own
    ``__copy__`` (GraphModule builds its generated class anew there), and then every attribute is carried over
    too: GraphModule's ``__copy__`` drops hooks and plain attributes."""
    cls = type(module)
    if getattr(cls, "__copy__", None) is not None:
        graph = getattr(module, "graph", None)
        owner = getattr(graph, "owning_module", None)
        new = copy.copy(module)
        if graph is not None and owner is not None:  # a GraphModule's copy claims the graph it shares
            graph.owning_module = owner
    else:
        new = cls.__new__(cls)
    new.__dict__.update(module.__dict__)
    return new


def _copy(module: nn.Module, clone_buffers: bool, memo: dict[int, nn.Module]) -> nn.Module:
    if id(module) in memo:  # a submodule shared between two places stays shared
        return memo[id(module)]
    if isinstance(module, torch.jit.ScriptModule):
        # Nothing rewrites inside TorchScript, and a shallow copy breaks its C++ side: share it, or copy it whole
        memo[id(module)] = copy.deepcopy(module) if clone_buffers else module
        return memo[id(module)]
    new = shallow_module_copy(module)
    memo[id(module)] = new
    state = new.__dict__  # written directly: nn.Module.__setattr__ is slow, and nothing here needs it

    def copied(held: nn.Module) -> nn.Module:
        return _copy(held, clone_buffers, memo)

    for name, value in state.items():
        if isinstance(value, types.MethodType) and isinstance(value.__self__, nn.Module):
            state[name] = types.MethodType(value.__func__, copied(value.__self__))  # bound to the module's copy
        elif not isinstance(value, (nn.Module, type, types.MethodType)) and callable(getattr(value, "map_modules", None)):
            state[name] = value.map_modules(copied)  # an object that runs for modules it names makes its own copy
        elif name in _MACHINERY or not isinstance(value, (nn.Module, list, tuple, dict)):
            # Hook dicts, the buffer-name set and friends would otherwise be shared with the original.
            if isinstance(value, (dict, set, list)):
                state[name] = value.copy()
        else:
            state[name] = _map_modules(value, copied, 0)
    state["_modules"] = {name: None if child is None else copied(child) for name, child in module._modules.items()}
    if clone_buffers:
        state["_buffers"] = {name: None if b is None else b.detach().clone() for name, b in module._buffers.items()}
    return new


def _map_modules(value: Any, fn: Callable[[nn.Module], nn.Module], depth: int) -> Any:
    """``value`` with every module ``m`` inside it (in lists, tuples and dicts) replaced by ``fn(m)``; containers
    are rebuilt where something inside changed and kept otherwise (lists and dicts are always new)."""
    if isinstance(value, nn.Module):
        return fn(value)
    if depth >= _MAX_NESTING or not isinstance(value, (list, tuple, dict)) or len(value) > _MAX_CONTAINER:
        return value.copy() if isinstance(value, (list, dict)) and depth == 0 else value
    if isinstance(value, dict):
        items = {key: _map_modules(item, fn, depth + 1) for key, item in value.items()}
        if type(value) is dict:
            return items
        if all(items[key] is item for key, item in value.items()):
            return value.copy() if depth == 0 else value
        return type(value)(items)  # OrderedDict and friends
    mapped = [_map_modules(item, fn, depth + 1) for item in value]
    if isinstance(value, list):
        return mapped
    if all(new is old for new, old in zip(mapped, value)):
        return value
    if type(value) is tuple:
        return tuple(mapped)
    make = getattr(type(value), "_make", None)  # a namedtuple; other tuple subclasses stay as they are
    return make(mapped) if make is not None else value


def _modules_in(value: Any, path: str, depth: int = 0) -> list[tuple[str, nn.Module]]:
    """The modules inside ``value`` (itself one, or in nested lists, tuples and dicts), each with its path."""
    if isinstance(value, nn.Module):
        return [(path, value)]
    if depth >= _MAX_NESTING or not isinstance(value, (list, tuple, dict)) or len(value) > _MAX_CONTAINER:
        return []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return [found for key, item in items for found in _modules_in(item, f"{path}[{key!r}]", depth + 1)]


def children(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every module ``module`` holds directly: its registered children, then those in plain attributes, named as
    Python reaches them (``blocks[0]``, ``branches['low']``); one registered and also held in a list is listed once,
    under its registered name. torch.nn's own classes register all they hold: their attributes are not searched."""
    registered = [(name, child) for name, child in module._modules.items() if child is not None]
    if type(module).__module__.startswith("torch.nn.modules."):
        return registered
    seen = {id(child) for _, child in registered}
    held = [found for name, value in module.__dict__.items() if name not in _MACHINERY for found in _modules_in(value, name)]
    return registered + [(name, found) for name, found in held if id(found) not in seen]


def substitute(root: nn.Module, swaps: Mapping[nn.Module, nn.Module]) -> None:
    """Make every module of ``root``'s tree that holds a key of ``swaps`` (registered or in a plain attribute)
    hold its value instead; ``root`` itself is the caller's to replace."""
    by_id = {id(old): new for old, new in swaps.items()}
    if not by_id:
        return
    seen: set[int] = set()
    pending = [root]
    while pending:
        module = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name, child in module._modules.items():
            if child is not None and id(child) in by_id:
                module._modules[name] = by_id[id(child)]
        for name, value in list(module.__dict__.items()):
            if name not in _MACHINERY and any(id(held) in by_id for _, held in _modules_in(value, name)):
                module.__dict__[name] = _map_modules(value, lambda held: by_id.get(id(held), held), 0)
        pending += [child for _, child in children(module)]


def tree_index(root: nn.Module) -> tuple[list[nn.Module], dict[int, list[str]]]:
    """Every module of ``root``'s tree once, ``root`` first, and every qualified name of each, by id (a module
    shared by two parents has two; those held in plain attributes are named as Python reaches them: ``psp.blocks[0]``)."""
    modules: dict[int, nn.Module] = {}
    paths: dict[int, list[str]] = {}

    def walk(module: nn.Module, path: str, on_path: set[int]) -> None:
        modules.setdefault(id(module), module)
        paths.setdefault(id(module), []).append(path)
        for name, child in children(module):
            if id(child) not in on_path:  # a module holding itself: stop
                walk(child, f"{path}.{name}" if path else name, on_path | {id(child)})

    walk(root, "", {id(root)})
    return list(modules.values()), paths


def tree_modules(root: nn.Module) -> list[nn.Module]:
    """Every module of ``root``'s tree once, ``root`` first: ``root.modules()`` and those held in plain attributes."""
    return tree_index(root)[0]


def carry_hooks(source: nn.Module, target: nn.Module) -> None:
    """Give ``target`` copies of every hook dict of ``source``: its calls run the same hooks (with ``target`` as module)."""
    for name in HOOK_DICTS:
        value = getattr(source, name, None)
        if value:
            setattr(target, name, copy.copy(value))
