"""Building the model a MODEL spec names: ``torchvision:NAME``, ``package.module:callable``, ``file.py:callable``,
a ``torch.export`` program saved as ``FILE.pt2``, or a whole model pickled as ``FILE.pt``.

Used by the command line and by the model-zoo sweep; torchvision is imported only for its specs.

A ``.pt2`` file is read by ``torch.export.load`` (an ``ExportedProgram``: a graph of ATen operators and
its tensors; loading it runs no code of the file's). A ``.pt`` file is read by
``torch.load(weights_only=False)``, which unpickles it: **a pickle can run arbitrary code while it is
loaded**, so give only files you trust as much as code you would run (the classes it names must be
importable too). A ``.pt`` holding a ``state_dict`` is refused: weights alone need the model's code
(``module:callable``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram


class ModelSpecError(ValueError):
    """A MODEL argument that names no model."""


def build_torchvision(name: str, **kwargs: Any) -> nn.Module:
    """A torchvision model in eval mode, with no pretrained weights (nothing is downloaded)."""
    import torchvision

    kwargs["weights"] = None
    if "weights_backbone" in inspect.signature(torchvision.models.get_model_builder(name)).parameters:
        kwargs["weights_backbone"] = None
    return torchvision.models.get_model(name, **kwargs).eval()


MODEL_FILE_SUFFIXES = (".pt2", ".pt")


def is_model_file(spec: str) -> bool:
    """Whether a MODEL spec names a saved model: ``FILE.pt2`` (an exported program) or ``FILE.pt`` (a pickle)."""
    return spec.endswith(MODEL_FILE_SUFFIXES)


def load_model(spec: str) -> nn.Module | ExportedProgram:
    """Build the model a MODEL spec names, in eval mode; a ``.pt2`` file gives its ``ExportedProgram``."""
    if is_model_file(spec):
        return load_model_file(spec)
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name:
        raise ModelSpecError(f"model spec {spec!r}: expected torchvision:NAME, module:callable or file.py:callable")
    if source == "torchvision":
        import torchvision

        if name not in torchvision.models.list_models():
            raise ModelSpecError(f"torchvision has no model {name!r}; see torchvision.models.list_models()")
        return build_torchvision(name)
    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise ModelSpecError(f"model spec {spec!r}: no file {source}")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:  # the user's file: whatever it raises is theirs to fix
            raise ModelSpecError(f"model spec {spec!r}: {source} raised {type(error).__name__} on import: {error}") from error
    else:
        try:
            module = importlib.import_module(source)
        except Exception as error:
            raise ModelSpecError(f"model spec {spec!r}: cannot import {source}: {type(error).__name__}: {error}") from error
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ModelSpecError(f"model spec {spec!r}: {source} has no callable {name!r}")
    try:
        model = factory()
    except Exception as error:
        raise ModelSpecError(
            f"model spec {spec!r}: {name}() raised {type(error).__name__}: {error} (the callable "
            f"must build the model with no arguments)"
        ) from error
    if not isinstance(model, nn.Module):
        raise ModelSpecError(f"model spec {spec!r}: {name}() returned {type(model).__name__}, not an nn.Module")
    return model.eval()


def load_model_file(spec: str) -> nn.Module | ExportedProgram:
    """``FILE.pt2`` by ``torch.export.load``; ``FILE.pt`` by ``torch.load(weights_only=False)``, which trusts the file
    as code (unpickling can run anything) and must hold a whole ``nn.Module``."""
    path = Path(spec)
    if not path.is_file():
        raise ModelSpecError(f"model spec {spec!r}: no file {spec}")
    if spec.endswith(".pt2"):
        try:
            return torch.export.load(path)
        except Exception as error:
            raise ModelSpecError(
                f"model spec {spec!r}: torch.export.load cannot read it ({type(error).__name__}: {error}); a .pt2 file "
                f"must be written by torch.export.save"
            ) from error
    try:
        model = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as error:
        raise ModelSpecError(
            f"model spec {spec!r}: torch.load(weights_only=False) cannot read it ({type(error).__name__}: {error}); a "
            f".pt file must hold a whole model saved by torch.save(model, path), its classes importable here"
        ) from error
    if isinstance(model, ExportedProgram):
        return model
    if not isinstance(model, nn.Module):
        raise ModelSpecError(
            f"model spec {spec!r}: the file holds a {type(model).__name__}, not an nn.Module (a state_dict needs the "
            f"model's code: give module:callable or file.py:callable that builds it, then load the weights there)"
        )
    return model.eval()
