"""Copies of a module tree that share its tensors, so fxpool can rewire modules without touching them.

:func:`structural_copy` gives new module objects (and new ``_modules``/``_parameters``/``_buffers``/
hook dicts) over the *same* parameter and buffer tensors: replacing a submodule of the copy never
reaches the original, and no parameter memory is doubled. ``clone_buffers=True`` also clones the
buffers, so a forward pass on the copy (batch-norm in train mode, say) cannot write the original's.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def structural_copy(module: nn.Module, *, clone_buffers: bool = False) -> nn.Module:
    """A copy of ``module``'s tree of module objects over the same parameters (and buffers)."""
    return _copy(module, clone_buffers, {})


def _copy(module: nn.Module, clone_buffers: bool, memo: dict[int, nn.Module]) -> nn.Module:
    if id(module) in memo:  # a submodule shared between two places stays shared
        return memo[id(module)]
    new = copy.copy(module)
    memo[id(module)] = new
    for name, value in list(vars(new).items()):
        # Hook dicts, the buffer-name set and friends would otherwise be shared with the original.
        if isinstance(value, (dict, set, list)) and not isinstance(value, torch.Tensor):
            setattr(new, name, copy.copy(value))
    new._modules = {name: None if child is None else _copy(child, clone_buffers, memo)
                    for name, child in module._modules.items()}
    if clone_buffers:
        new._buffers = {name: None if b is None else b.detach().clone() for name, b in module._buffers.items()}
    return new
