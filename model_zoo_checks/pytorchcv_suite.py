"""The pytorchcv suite: one model from every pytorchcv family (module) with an adaptive pool, or every model.

Names are ``pytorchcv/MODEL`` (``pytorchcv/resnet18``), built with ``pretrained=False`` from
pytorchcv's registry (``pytorchcv.model_provider._models``, the dict ``get_model`` reads); nothing
is downloaded. Each model says its input size (``in_size``: 224 for ImageNet models, 32 for the CIFAR
ones, 480 or 1024x2048 for segmentation); the suite sweeps it and a second size 26 larger on each axis,
where no power of two past 2 divides the windows. Many of pytorchcv's classifiers end in a fixed
``AvgPool2d(7)`` (and its segmentation and pose models concatenate branches of fixed ratios): those run at
their own size only, so their second case is a skip whose reason is the original's own error (an eager
probe of the 43 family models: 25 of the 38 tried do not run at the second size; all 37 tried at their own size,
and the 13 that run at the second, convert exactly).

The family sweep (``--all``) takes the smallest model (by parameters, from the registry census of
:mod:`model_zoo_checks.registry`) of every pytorchcv module whose models hold an adaptive pool;
``--every-model`` takes all of pytorchcv's models (:func:`every_name`).
"""

from __future__ import annotations

from torch import nn

PREFIX = "pytorchcv/"
DEFAULT: tuple[str, ...] = ()  # the default set stays as it is; pytorchcv is an optional install
SIZE_STEP = 26
# pytorchcv modules whose models are not swept, each with its reason (their models are reported as skips).
NOT_SWEPT: dict[str, str] = {
    family: "an audio model (speech recognition): pytorchcv builds its front end with librosa, which is not installed"
    for family in ("jasper", "jasperdr", "quartznet")
}


def _registry() -> dict[str, object]:
    from pytorchcv.model_provider import _models

    return _models


def every_name() -> list[str]:
    """Every model pytorchcv registers (``--every-model``)."""
    return [PREFIX + name for name in _registry()]


def family(name: str) -> str:
    """The pytorchcv module that defines the model (``resnet`` for ``pytorchcv/resnet18``)."""
    builder = _registry()[name[len(PREFIX) :]]
    return str(getattr(builder, "__module__", "")).rsplit(".", 1)[-1]


def names() -> list[str]:
    """The family sweep: the smallest model with an adaptive pool of each pytorchcv module (from the census)."""
    from .registry import census

    rows = census()
    smallest: dict[str, tuple[int, str]] = {}
    for name in every_name():
        row = rows.get(name)
        key = family(name)
        if row is None or not row.holds_pool or key in NOT_SWEPT:
            continue
        if key not in smallest or row.params < smallest[key][0]:
            smallest[key] = (row.params, name)
    return sorted(name for _, name in smallest.values())


def not_swept(name: str) -> str:
    """Why the model is not swept ("" where it is)."""
    return NOT_SWEPT.get(family(name), "")


def own_size(name: str) -> tuple[int, int]:
    """The input size the model declares (``in_size``), from the census; 224x224 where it declares none."""
    from .registry import census

    row = census().get(name)
    return (row.size[0], row.size[1]) if row is not None and row.size else (224, 224)


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    if chosen:
        return [(1, 3, s, s) for s in chosen]
    height, width = own_size(name)
    return [(1, 3, height, width), (1, 3, height + SIZE_STEP, width + SIZE_STEP)]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    return _registry()[name[len(PREFIX) :]](pretrained=False).eval()


def declared_size(model: nn.Module) -> tuple[int, int] | None:
    """A built model's ``in_size`` (pytorchcv's models carry it), for the census."""
    size = getattr(model, "in_size", None)
    return (int(size[0]), int(size[1])) if isinstance(size, (tuple, list)) and len(size) == 2 else None
