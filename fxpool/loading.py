"""Building the model a MODEL spec names: ``torchvision:NAME``, ``package.module:callable`` or ``file.py:callable``.

Used by the command line and by the model-zoo sweep; torchvision is imported only for its specs.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any

from torch import nn


class ModelSpecError(ValueError):
    """A MODEL argument that names no model."""


def build_torchvision(name: str, **kwargs: Any) -> nn.Module:
    """A torchvision model in eval mode, with no pretrained weights (nothing is downloaded)."""
    import torchvision

    kwargs["weights"] = None
    if "weights_backbone" in inspect.signature(torchvision.models.get_model_builder(name)).parameters:
        kwargs["weights_backbone"] = None
    return torchvision.models.get_model(name, **kwargs).eval()


def load_model(spec: str) -> nn.Module:
    """Build the model a MODEL spec names, in eval mode."""
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
