"""Building the model a MODEL spec names (the command line's and the model-zoo sweep's), and what each may run.

- ``torchvision:NAME``, ``timm:NAME``: the library's builder, random weights unless asked for (timm's
  ``pretrained=True`` takes only weights already in the local cache, and says so where there are none);
- ``hf:ID_OR_FOLDER``: a transformers model from a local folder or the local cache (random weights from its
  config where it has none, said); no ``trust_remote_code``, nothing downloaded;
- ``package.module:callable`` or ``path/to/file.py:callable``: the user's own code, run to build the model;
- ``FILE.pt2``: every pickle in the archive must pass PyTorch's weights-only unpickler, then the program is
  loaded from those same bytes: **no code of the file's runs** unless ``trust_file=True``;
- ``FILE.pt``: ``torch.load(weights_only=True)``; a whole pickled ``nn.Module`` **can run arbitrary code from
  the file** and loads only with ``trust_file=True`` (``--trust-model-file``), which the refusal names. A
  ``state_dict`` is refused: weights alone need the model's code (``module:callable``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import io
import json
import pickle
import sys
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram

from .errors import error_summary, require
from .modelspecs import spec_forms

TRUST_FLAG = "--trust-model-file"


class ModelSpecError(ValueError):
    """A MODEL argument that names no model."""


class UntrustedModelFileError(ModelSpecError):
    """A model file whose loading would run code from the file, and the caller did not opt in."""


@dataclass(frozen=True)
class LoadedModel:
    """The model a spec names (eval mode), and where its weights came from, in words."""

    model: nn.Module | ExportedProgram
    weights: str


def build_torchvision(name: str, weights: str | None = None, **kwargs: Any) -> nn.Module:
    """A torchvision model in eval mode; random weights unless ``weights`` names some (``"DEFAULT"``, an enum
    member's name), which torchvision downloads into its cache where they are not there yet."""
    import torchvision

    kwargs["weights"] = weights
    if "weights_backbone" in inspect.signature(torchvision.models.get_model_builder(name)).parameters:
        kwargs.setdefault("weights_backbone", None)
    return torchvision.models.get_model(name, **kwargs).eval()


def load_model(spec: str, *, weights: str | None = None, pretrained: bool = False, trust_file: bool = False) -> LoadedModel:
    """Build the model a MODEL spec names, in eval mode; a ``.pt2`` file gives its ``ExportedProgram``.

    ``weights`` is torchvision's ``weights=`` (``"DEFAULT"``); ``pretrained`` asks timm and Hugging Face specs for
    weights from the local cache; ``trust_file`` lets a model file run code while it loads."""
    if spec.endswith((".pt2", ".pt")):
        _refuse_weights_for(spec, weights, pretrained, "a model file carries its own weights")
        if not Path(spec).is_file():
            raise ModelSpecError(f"model spec {spec!r}: no file {spec}")
        data = Path(spec).read_bytes()  # checked and loaded from the same bytes: the file cannot change in between
        load = _load_program if spec.endswith(".pt2") else _load_pickled_model
        return LoadedModel(load(spec, data, trust_file), "the file's")
    source, sep, name = spec.partition(":") if spec.startswith(("hf:", "timm:", "torchvision:")) else spec.rpartition(":")
    if not sep or not source or not name:
        raise ModelSpecError(f"model spec {spec!r}: expected one of {spec_forms()}")
    if source == "torchvision":
        _refuse_weights_for(spec, None, pretrained, "torchvision takes --weights DEFAULT (or a weights enum's name)")
        return _torchvision(spec, name, weights)
    if source == "timm":
        _refuse_weights_for(spec, weights, False, "timm takes --pretrained")
        return _timm(spec, name, pretrained)
    if source == "hf":
        _refuse_weights_for(spec, weights, False, "Hugging Face models take --pretrained")
        return _hugging_face(spec, name, pretrained)
    _refuse_weights_for(spec, weights, pretrained, "the callable builds the model with the weights it chooses")
    return LoadedModel(_from_code(spec, source, name), "as the callable built them")


def _refuse_weights_for(spec: str, weights: str | None, pretrained: bool, why: str) -> None:
    if weights is not None:
        raise ModelSpecError(f"model spec {spec!r}: --weights applies to torchvision:NAME only ({why})")
    if pretrained:
        raise ModelSpecError(f"model spec {spec!r}: --pretrained applies to timm:NAME and hf:ID only ({why})")


def _torchvision(spec: str, name: str, weights: str | None) -> LoadedModel:
    require("torchvision", f"model spec {spec!r}")
    import torchvision

    if name not in torchvision.models.list_models():
        raise ModelSpecError(f"torchvision has no model {name!r}; see torchvision.models.list_models()")
    try:
        model = build_torchvision(name, weights)
    except (ValueError, KeyError) as error:
        raise ModelSpecError(f"model spec {spec!r} --weights {weights}: {error}") from error
    return LoadedModel(model, f"torchvision's {weights} weights" if weights else "random (torchvision, weights=None)")


def _timm(spec: str, name: str, pretrained: bool) -> LoadedModel:
    require("timm", f"model spec {spec!r}")
    import timm

    if not timm.is_model(name):
        raise ModelSpecError(f"timm has no model {name!r}; see timm.list_models()")
    cached = _cached_timm_weights(name) if pretrained else None
    if cached is not None:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": cached})
        return LoadedModel(model.eval(), f"pretrained, from the local cache ({Path(cached).name})")
    said = "random (timm, pretrained=False)"
    if pretrained:
        said = "random: no pretrained weights of this model are in the local Hugging Face cache (nothing is downloaded)"
    return LoadedModel(timm.create_model(name, pretrained=False).eval(), said)


def _cached_timm_weights(name: str) -> str | None:
    """The path of ``name``'s pretrained weights in the local Hugging Face cache, or None."""
    import timm

    try:
        config = timm.models.get_pretrained_cfg(name)
        from huggingface_hub import try_to_load_from_cache
    except (ImportError, RuntimeError):
        return None
    hub_id = getattr(config, "hf_hub_id", None) if config is not None else None
    if not hub_id:
        return None
    repo, _, revision = hub_id.partition("@")
    for filename in ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"):
        found = try_to_load_from_cache(repo, filename, revision=revision or None)
        if isinstance(found, str):
            return found
    return None


def _hugging_face(spec: str, name: str, pretrained: bool) -> LoadedModel:
    require("transformers", f"model spec {spec!r}")
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its notices on building from a config are not the user's
    try:
        return _build_hugging_face(spec, name, pretrained)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _build_hugging_face(spec: str, name: str, pretrained: bool) -> LoadedModel:
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(name, local_files_only=True, trust_remote_code=False)
    except Exception as error:  # transformers raises OSError, ValueError, KeyError for a missing or foreign config
        raise ModelSpecError(
            f"model spec {spec!r}: no Hugging Face config for {name!r} in that folder or the local cache "
            f"({error_summary(error)}); give a folder "
            f"holding config.json, or an id downloaded before (nothing is downloaded here)"
        ) from error
    architecture = (getattr(config, "architectures", None) or [None])[0]
    model_class: Any = getattr(transformers, architecture, None) if architecture else None
    if model_class is None:
        mapping: Any = transformers.AutoModel._model_mapping  # the config's base model class
        model_class = mapping.get(type(config), None)
    if model_class is None:
        raise ModelSpecError(f"model spec {spec!r}: transformers has no model class for {type(config).__name__}")
    if pretrained:
        try:
            model = model_class.from_pretrained(name, local_files_only=True)
            return LoadedModel(model.eval(), f"pretrained, {model_class.__name__}.from_pretrained (local files)")
        except OSError:
            pass  # no weights there: random weights from the config, said below
    said = f"random ({model_class.__name__} built from its config)"
    if pretrained:
        said = f"random: no weights for {name!r} in that folder or the local cache ({model_class.__name__} from its config)"
    return LoadedModel(model_class._from_config(config).eval(), said)


def _from_code(spec: str, source: str, name: str) -> nn.Module:
    """``file.py:callable`` or ``module:callable``: the user's code, imported and called with no arguments."""
    module = _import_file(spec, Path(source)) if source.endswith(".py") else _import_module(spec, source)
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


def _import_file(spec: str, path: Path) -> Any:
    if not path.is_file():
        raise ModelSpecError(f"model spec {spec!r}: no file {path}")
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    try:
        with _on_path(path.parent):  # the file's own imports of its neighbours
            module_spec.loader.exec_module(module)
    except Exception as error:  # the user's file: whatever it raises is theirs to fix
        raise ModelSpecError(f"model spec {spec!r}: {path} raised {type(error).__name__} on import: {error}") from error
    return module


def _import_module(spec: str, source: str) -> Any:
    """``source`` imported as ``python -m fxpool`` would: the current folder on the path as well."""
    try:
        with _on_path(Path.cwd()):
            return importlib.import_module(source)
    except Exception as error:
        hint = ""
        candidate = Path(*source.split(".")).with_suffix(".py")
        if isinstance(error, ModuleNotFoundError) and error.name == source.split(".")[0]:
            hint = f"; for a file, name it by its path: {candidate}:{spec.rpartition(':')[2]}" if not candidate.is_file() else ""
        raise ModelSpecError(f"model spec {spec!r}: cannot import {source}: {type(error).__name__}: {error}{hint}") from error


@contextmanager
def _on_path(folder: Path) -> Any:
    entry = str(folder.resolve())
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _load_program(spec: str, data: bytes, trust_file: bool) -> ExportedProgram:
    if not trust_file:
        unsafe = unsafe_archive_members(data)
        if unsafe:
            raise UntrustedModelFileError(
                f"model spec {spec!r}: the archive holds pickles that PyTorch's weights-only unpickler refuses "
                f"({'; '.join(unsafe[:3])}{' ...' if len(unsafe) > 3 else ''}): loading it would run code from the file. "
                f"Nothing was loaded. If you trust this file as you trust code you run, pass {TRUST_FLAG} "
                f"(load_model(..., trust_file=True))"
            )
    try:
        return torch.export.load(io.BytesIO(data))
    except Exception as error:
        raise ModelSpecError(
            f"model spec {spec!r}: torch.export.load cannot read it ({type(error).__name__}: {error}); a .pt2 file "
            f"must be written by torch.export.save"
        ) from error


def _load_pickled_model(spec: str, data: bytes, trust_file: bool) -> nn.Module | ExportedProgram:
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=not trust_file, map_location="cpu")
    except pickle.UnpicklingError as error:
        if trust_file:
            raise ModelSpecError(f"model spec {spec!r}: torch.load cannot read it ({type(error).__name__}: {error})") from error
        raise UntrustedModelFileError(
            f"model spec {spec!r}: the file is a pickle that torch.load(weights_only=True) refuses (a whole pickled model, "
            f"or other objects: {error_summary(error).partition(': ')[2][:200]}); unpickling it would run code from the file. "
            f"Nothing was loaded. If you trust this file as you trust code you run, pass {TRUST_FLAG} "
            f"(load_model(..., trust_file=True)); or save the model with torch.export.save and give the .pt2"
        ) from error
    except Exception as error:
        raise ModelSpecError(
            f"model spec {spec!r}: torch.load cannot read it ({type(error).__name__}: {error}); a .pt file must hold a "
            f"whole model saved by torch.save(model, path), its classes importable here"
        ) from error
    if isinstance(loaded, ExportedProgram):
        return loaded
    if not isinstance(loaded, nn.Module):
        raise ModelSpecError(
            f"model spec {spec!r}: the file holds a {type(loaded).__name__}, not an nn.Module (a state_dict needs the "
            f"model's code: give module:callable or file.py:callable that builds it, then load the weights there)"
        )
    return loaded.eval()


# Members of a torch.export archive that hold text or raw tensor bytes, never a pickle.
_TEXT_SUFFIXES = (".json", "archive_format", "archive_version", "byteorder", "version", "serialization_id", ".txt")
_PICKLE_START = b"\x80"  # the PROTO opcode every pickle of protocol 2 and up begins with
_ZIP_START = b"PK\x03\x04"  # torch.save's own format: a zip holding data.pkl


def unsafe_archive_members(data: bytes) -> list[str]:
    """The members of a ``.pt2`` archive (its bytes) whose pickles the weights-only unpickler refuses, each with why.

    Raw tensor files (listed with ``use_pickle: false`` in the archive's weights and constants configs) and text are
    skipped; everything else that is a pickle or a ``torch.save`` zip must load with
    ``torch.load(weights_only=True)``. Members PyTorch unpickles with a loader of its own (TorchScript and opaque
    objects among the constants) are refused outright: they can construct arbitrary objects."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        return []  # not an archive: torch.export.load says so
    raw = _raw_tensor_members(archive)
    unsafe = []
    for member in archive.namelist():
        base = member.rsplit("/", 1)[-1]
        if member.endswith("/") or member in raw or base.endswith(_TEXT_SUFFIXES):
            continue
        if base.startswith(("custom_obj_", "opaque_obj_")):
            unsafe.append(f"{member}: a pickled object PyTorch loads with its full unpickler")
            continue
        content = archive.read(member)
        if not content.startswith((_PICKLE_START, _ZIP_START)):
            continue
        try:
            torch.load(io.BytesIO(content), weights_only=True, map_location="cpu")
        except Exception as error:
            first = (str(error).strip().splitlines() or [""])[0]
            unsafe.append(f"{member}: {type(error).__name__}: {first[:160]}")
    return unsafe


def _raw_tensor_members(archive: zipfile.ZipFile) -> set[str]:
    """The archive members its weights and constants configs list as raw tensor bytes (``use_pickle: false``)."""
    raw: set[str] = set()
    for member in archive.namelist():
        if not member.endswith(("model_weights_config.json", "model_constants_config.json")):
            continue
        folder = member.rsplit("/", 1)[0]
        try:
            config = json.loads(archive.read(member)).get("config", {})
        except (ValueError, AttributeError):
            continue
        for entry in config.values():
            if isinstance(entry, dict) and entry.get("use_pickle") is False and isinstance(entry.get("path_name"), str):
                raw.add(f"{folder}/{entry['path_name']}")
    return raw
