"""Copies of a module tree that share its tensors, so fxpool can rewire modules without touching them.

:func:`structural_copy` gives new module objects (and new ``_modules``/``_parameters``/``_buffers``/
hook dicts) over the *same* parameter and buffer tensors: replacing a submodule of the copy never
reaches the original, and no parameter memory is doubled. ``clone_buffers=True`` also clones the
buffers, so a forward pass on the copy (batch-norm in train mode, say) cannot write the original's.

:func:`install_graph` makes a module run a traced graph as its forward while keeping all it has, and
:func:`graph_of` finds that graph again (copies rebind it to a copy of the graph). :func:`has_hooks`
and :func:`carry_hooks` let a module that stands in for another keep the hooks
users registered on it.
"""

from __future__ import annotations

import copy

import torch
from torch import fx, nn

# Every per-module hook dict of nn.Module, forward and backward, state-dict hooks included.
HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_is_full_backward_hook",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
# The hooks that change what a call computes or observes (state-dict hooks do not).
CALL_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def structural_copy(module: nn.Module, *, clone_buffers: bool = False) -> nn.Module:
    """A copy of ``module``'s tree of module objects over the same parameters (and buffers)."""
    return _copy(module, clone_buffers, {})


def shallow_module_copy(module: nn.Module) -> nn.Module:
    """A new object of the module's class with the same attribute values.

    ``copy.copy`` goes through ``__reduce_ex__``, which parametrized modules (weight_norm,
    spectral_norm, ``torch.nn.utils.parametrize``) refuse; only classes with their own ``__copy__``
    use it (GraphModule builds its generated class anew there), and even then every attribute —
    hooks and plain attributes, which GraphModule's ``__copy__`` drops — is carried over.
    """
    cls = type(module)
    if getattr(cls, "__copy__", None) is not None:
        new = copy.copy(module)
    else:
        new = cls.__new__(cls)
    new.__dict__.update(module.__dict__)
    return new


def _copy(module: nn.Module, clone_buffers: bool, memo: dict[int, nn.Module]) -> nn.Module:
    if id(module) in memo:  # a submodule shared between two places stays shared
        return memo[id(module)]
    if isinstance(module, torch.jit.ScriptModule):
        # Nothing rewrites inside TorchScript, and a shallow copy of one breaks its C++ side: share
        # it, or copy it whole where its buffers must not be written.
        memo[id(module)] = copy.deepcopy(module) if clone_buffers else module
        return memo[id(module)]
    new = shallow_module_copy(module)
    memo[id(module)] = new
    state = new.__dict__  # written directly: nn.Module.__setattr__ is slow, and nothing here needs it
    for name, value in state.items():
        # Hook dicts, the buffer-name set and friends would otherwise be shared with the original.
        if isinstance(value, (dict, set, list)):
            state[name] = value.copy()
    state["_modules"] = {
        name: None if child is None else _copy(child, clone_buffers, memo) for name, child in module._modules.items()
    }
    if clone_buffers:
        state["_buffers"] = {name: None if b is None else b.detach().clone() for name, b in module._buffers.items()}
    graph = graph_of(module)
    if graph is not None:  # a converted module: its copy runs a copy of its graph, over the copy's tensors
        install_graph(new, _copy(graph, clone_buffers, memo))  # type: ignore[arg-type]
    return new


def install_graph(module: nn.Module, gm: fx.GraphModule) -> None:
    """Make ``module`` run ``gm`` as its forward, keeping everything else it has.

    The module keeps its class, methods, attributes, hooks and every submodule and buffer, used by
    the graph or not, so ``isinstance``, ``state_dict`` keys and the original's checkpoints still
    hold. Where the graph holds its own container at a path of the module (torch.fx builds bare
    ones), the two share their parameter and buffer dicts, so ``module.to(...)`` moves what the
    graph reads. The module's dicts are its own (a copy's, never the user's): see structural_copy.
    """
    for path, graph_part in gm.named_modules():
        try:
            part = module.get_submodule(path)
        except AttributeError:  # a replacement under a fresh name: the same object on both sides
            continue
        if part is not graph_part:
            for name, tensor in graph_part._buffers.items():
                if name not in part._buffers:
                    # A tensor the graph reads that the module does not hold as a buffer (torch.fx
                    # registers a plain tensor attribute or a tensor made in forward as one): the
                    # module holds it too, non-persistent, so its state_dict keys stay the original's.
                    part._buffers[name] = tensor
                    part._non_persistent_buffers_set.add(name)
            graph_part.__dict__["_parameters"] = part._parameters
            graph_part.__dict__["_buffers"] = part._buffers
    module.__dict__["forward"] = gm.forward


def graph_of(module: nn.Module) -> fx.GraphModule | None:
    """The graph a converted module runs (see :func:`install_graph`), or ``None``."""
    forward = module.__dict__.get("forward")
    owner = getattr(forward, "__self__", None)
    return owner if isinstance(owner, fx.GraphModule) and owner is not module else None


def module_paths(root: nn.Module) -> dict[int, list[str]]:
    """Every qualified name of every module below ``root``, by module id (a shared module has several)."""
    paths: dict[int, list[str]] = {}

    def walk(module: nn.Module, path: str, on_path: set[int]) -> None:
        paths.setdefault(id(module), []).append(path)
        for name, child in module._modules.items():
            if child is not None and id(child) not in on_path:  # a module holding itself: stop
                walk(child, f"{path}.{name}" if path else name, on_path | {id(child)})

    walk(root, "", {id(root)})
    return paths


def has_hooks(module: nn.Module) -> bool:
    """True when a hook is registered on the module itself for its calls (forward or backward)."""
    return any(getattr(module, name, None) for name in CALL_HOOK_DICTS)


def carry_hooks(source: nn.Module, target: nn.Module) -> None:
    """Give ``target`` copies of every hook dict of ``source``, so its calls run the same hooks.

    The hooks then receive ``target`` as their module argument.
    """
    for name in HOOK_DICTS:
        value = getattr(source, name, None)
        if value:
            setattr(target, name, copy.copy(value))
