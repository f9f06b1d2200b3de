"""The MONAI suite: MONAI's networks with adaptive pools, in 3d (and QuickNAT, MONAI's 2d one with them).

Names are ``monai/NAME`` (``monai/SEResNet50``). Every network is built with random weights
(``pretrained=False`` where it has the option), one input channel and a small output. MONAI's
pools are global (a classifier's or a squeeze-and-excitation block's output of 1 per axis), so the
volumes are chosen uneven (45 x 51 x 57) rather than to make windows uneven: the point is 3d
export, MONAI's own block structure and its factories (``Pool[Pool.ADAPTIVEAVG, 3]``).

:data:`NETWORKS` was chosen by inspection (:func:`discover`: the modules of ``monai.networks.nets``
whose source makes an adaptive pool, through ``Pool.ADAPTIVEAVG``/``ADAPTIVEMAX``, ``nn.Adaptive*``,
or MONAI's squeeze-and-excitation blocks, or builds on another such module); a slow test re-runs it
and fails when the installed MONAI gains or loses one, so the table cannot fall behind silently.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from torch import nn

PREFIX = "monai/"
VOLUMES = ((1, 1, 48, 48, 48), (1, 1, 45, 51, 57))


def _nets() -> Any:
    import monai.networks.nets

    return monai.networks.nets


# name -> (the nets module it stands for, builder)
NETWORKS: dict[str, tuple[str, Callable[[], nn.Module]]] = {
    "DenseNet121": ("densenet", lambda: _nets().DenseNet121(spatial_dims=3, in_channels=1, out_channels=2)),
    "SEResNet50": ("senet", lambda: _nets().SEResNet50(spatial_dims=3, in_channels=1, num_classes=2)),
    "SEResNext50": ("senet", lambda: _nets().SEResNext50(spatial_dims=3, in_channels=1, num_classes=2)),
    "EfficientNetBN-b0": (
        "efficientnet",
        lambda: _nets().EfficientNetBN("efficientnet-b0", spatial_dims=3, in_channels=1, num_classes=2, pretrained=False),
    ),
    "resnet18": ("resnet", lambda: _nets().resnet18(spatial_dims=3, n_input_channels=1, num_classes=2)),
    "FlexibleUNet-efficientnet-b0": (
        "flexible_unet",
        lambda: _nets().FlexibleUNet(in_channels=1, out_channels=2, backbone="efficientnet-b0", spatial_dims=3, pretrained=False),
    ),
    "Quicknat": ("quicknat", lambda: _nets().Quicknat(num_classes=2, num_channels=1, se_block="CSE")),
}
# Input shapes where a network needs others than VOLUMES (a U-Net halves each axis five times; QuickNAT is 2d).
SHAPES: dict[str, tuple[tuple[int, ...], ...]] = {
    "monai/FlexibleUNet-efficientnet-b0": ((1, 1, 64, 64, 64), (1, 1, 64, 96, 128)),
    "monai/Quicknat": ((1, 1, 64, 64), (1, 1, 96, 112)),
}
# nets modules discover() finds that hold no swept network, each with its reason.
NOT_SWEPT: dict[str, str] = {
    "daf3d": "builds on monai's ResNet but never calls its pool (its forward stops at the feature maps)",
}
DEFAULT = ("monai/SEResNet50",)
MARKERS = ("ADAPTIVEAVG", "ADAPTIVEMAX", "AdaptiveAvgPool", "AdaptiveMaxPool", "adaptive_avg_pool", "adaptive_max_pool")


def names() -> list[str]:
    return [PREFIX + name for name in NETWORKS]


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    if chosen:
        dims = len(SHAPES.get(name, VOLUMES)[0]) - 2
        return [(1, 1) + (s,) * dims for s in chosen]
    return list(SHAPES.get(name, VOLUMES))


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    return NETWORKS[name[len(PREFIX) :]][1]().eval()


def discover() -> set[str]:
    """The ``monai.networks.nets`` modules that make an adaptive pool, directly or through another such module."""
    import importlib
    import pkgutil

    import monai.networks.nets as package

    sources = {}
    for info in pkgutil.iter_modules(package.__path__):
        try:
            sources[info.name] = inspect.getsource(importlib.import_module(f"{package.__name__}.{info.name}"))
        except Exception:  # an optional dependency it imports is missing
            continue
    pooling = {name for name, source in sources.items() if any(m in source for m in MARKERS) or "squeeze_and_excitation" in source}
    while True:
        more = {
            name
            for name, source in sources.items()
            if name not in pooling and any(re.search(rf"monai\.networks\.nets\.{p}\b|from \.{p} import", source) for p in pooling)
        }
        if not more:
            return pooling
        pooling |= more
