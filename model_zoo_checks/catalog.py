"""Which models the zoo sweep runs, how each is built, and at which input shapes.

Seven suites: ``torchvision`` (plain names, ``alexnet``), ``timm`` (``timm/NAME``, see
:mod:`model_zoo_checks.timm_suite`), ``smp`` (``smp/ARCH-ENCODER``, see
:mod:`model_zoo_checks.smp_suite`), ``transformers`` (``hf/MODEL_TYPE``, see
:mod:`model_zoo_checks.transformers_suite`), ``monai`` (``monai/NAME``, see
:mod:`model_zoo_checks.monai_suite`), ``thirdparty`` (``thirdparty/LIBRARY-MODEL``, see
:mod:`model_zoo_checks.thirdparty_suite`) and ``pytorchcv`` (``pytorchcv/NAME``, see
:mod:`model_zoo_checks.pytorchcv_suite`); all but torchvision are optional installs. Each suite module
gives ``names()``, ``shapes(name, sizes)``, ``build(name, shape)`` and its ``DEFAULT`` names, and those
with a registry larger than their sweep ``every_name()`` (``--every-model``). ``fault/KIND``
(:mod:`model_zoo_checks.faults`) names models that break their process on purpose; no suite lists them.

In torchvision, discovery is by inspection: a model is swept when one of its modules is an adaptive pool or the
source of one of its module classes calls one. The registry's ``quantized_*`` entries are swept as
their float variants (``quantize=False``). A few variants built from torchvision parts cover what
the registry lacks: adaptive max pooling and a PSPNet-style pyramid.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torchvision
from torch import nn

from fxpool.calls import describe_module
from fxpool.loading import build_torchvision

from . import faults, monai_suite, pytorchcv_suite, registry, smp_suite, thirdparty_suite, timm_suite, transformers_suite

SUITES = ("torchvision", "timm", "smp", "transformers", "monai", "thirdparty", "pytorchcv")
SUITE_PACKAGES = {
    "torchvision": "torchvision",
    "timm": "timm",
    "smp": "segmentation_models_pytorch",
    "transformers": "transformers",
    "monai": "monai",
    "thirdparty": "efficientnet_pytorch",  # the suite's first library; its other models need their own
    "pytorchcv": "pytorchcv",
}
SUITE_MODULES: dict[str, Any] = {
    "timm": timm_suite,
    "smp": smp_suite,
    "transformers": transformers_suite,
    "monai": monai_suite,
    "thirdparty": thirdparty_suite,
    "pytorchcv": pytorchcv_suite,
    "faults": faults,  # not a suite of SUITES: swept only by name
}
TORCHVISION_DEFAULT = (
    "alexnet",
    "vgg11",
    "resnet18",
    "densenet121",
    "mobilenet_v2",
    "googlenet",
    "squeezenet1_1",
    "efficientnet_b0",
    "mobilenet_v3_small",
    "r3d_18",
    "pspnet_resnet18",
    "vgg11_max_pool",
)
TORCHVISION_SIZES = (160, 320)

POOL_SOURCE_MARKERS = ("adaptive_avg_pool", "adaptive_max_pool", 'mode="area"', "mode='area'")

# Per-model builder arguments (one table).
OVERRIDES: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
    "quantized_googlenet": {"aux_logits": False, "init_weights": False, "quantize": False},
    "quantized_inception_v3": {"aux_logits": False, "init_weights": False, "quantize": False},
}
# Fixed input shapes for video models and for models too slow to sweep at several sizes (one table).
INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "r3d_18": (1, 3, 4, 112, 112),
    "mc3_18": (1, 3, 4, 112, 112),
    "r2plus1d_18": (1, 3, 4, 112, 112),
    "swin3d_t": (1, 3, 4, 112, 112),
    "swin3d_s": (1, 3, 4, 112, 112),
    "swin3d_b": (1, 3, 4, 112, 112),
    "regnet_y_128gf": (1, 3, 160, 160),  # 645M parameters, 375 GFLOPs at its own 384
    "mvit_v1_b": (1, 3, 16, 224, 224),  # video models of the full registry (--every-model): clips at their own shape
    "mvit_v2_s": (1, 3, 16, 224, 224),
    "s3d": (1, 3, 16, 224, 224),
}
# Known limitations, each with its reason: reported as skips, never dropped.
KNOWN_LIMITATIONS: dict[str, str] = {**transformers_suite.KNOWN_LIMITATIONS}
NO_POOL = "holds no adaptive pool (nothing for fxpool to convert; found by building it, model_zoo_checks/registry.json)"


class PyramidPoolingNet(nn.Module):
    """PSPNet-style segmentation head on a resnet18 trunk: pooled at 1, 2, 3 and 6, upsampled, fused."""

    def __init__(self, classes: int = 21, bins: tuple[int, ...] = (1, 2, 3, 6)) -> None:
        super().__init__()
        trunk = torchvision.models.resnet18(weights=None)
        self.trunk = nn.Sequential(*list(trunk.children())[:-2])
        self.stages = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(b), nn.Conv2d(512, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU()) for b in bins
        )
        self.classifier = nn.Conv2d(512 + 128 * len(bins), classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.trunk(x)
        size = features.shape[-2:]
        pyramid = [features] + [
            nn.functional.interpolate(stage(features), size=size, mode="bilinear", align_corners=False) for stage in self.stages
        ]
        logits = self.classifier(torch.cat(pyramid, dim=1))
        return nn.functional.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


class ConcatPoolHead(nn.Module):
    """The concat-pooling head (average and max side by side) that fine-tuning libraries put on a trunk."""

    def __init__(self, channels: int, classes: int, output_size: int) -> None:
        super().__init__()
        self.average = nn.AdaptiveAvgPool2d(output_size)
        self.maximum = nn.AdaptiveMaxPool2d(output_size)
        self.fc = nn.Linear(2 * channels * output_size * output_size, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cat([self.average(x), self.maximum(x)], dim=1).flatten(1))


def _resnet18_concat_pool() -> nn.Module:
    model = torchvision.models.resnet18(weights=None)
    return nn.Sequential(*list(model.children())[:-2], ConcatPoolHead(512, 1000, 1))


def _vgg11_max_pool() -> nn.Module:
    model = torchvision.models.vgg11(weights=None)
    model.avgpool = nn.AdaptiveMaxPool2d(7)
    return model


# Models built from torchvision parts (randomly initialised, like the registry's).
VARIANTS: dict[str, Callable[[], nn.Module]] = {
    "pspnet_resnet18": PyramidPoolingNet,
    "resnet18_concat_pool": _resnet18_concat_pool,
    "vgg11_max_pool": _vgg11_max_pool,
}


def suite_of(name: str) -> str:
    for suite, module in SUITE_MODULES.items():
        if name.startswith(module.PREFIX):
            return suite
    return "torchvision"


def installed(suite: str) -> bool:
    return importlib.util.find_spec(SUITE_PACKAGES[suite]) is not None


DEFAULT_SHAPES: dict[str, tuple[int, ...]] = {**transformers_suite.DEFAULT_SHAPES}


def default_names(suites: Sequence[str]) -> list[str]:
    """The default sweep's models of these suites (a few per suite beside torchvision's dozen)."""
    return [name for suite in suites for name in (TORCHVISION_DEFAULT if suite == "torchvision" else SUITE_MODULES[suite].DEFAULT)]


def swept_names(suites: Sequence[str] = ("torchvision",)) -> list[str]:
    """Every model of these suites' full sweeps."""
    found: list[str] = []
    for suite in suites:
        if suite == "torchvision":
            found += [n for n in torchvision.models.list_models() if has_adaptive_pool(n)] + list(VARIANTS)
        else:
            found += SUITE_MODULES[suite].names()
    return found


def every_name(suites: Sequence[str]) -> list[str]:
    """Every model the suites' libraries register (``--every-model``): torchvision's whole registry and its
    variants, every timm architecture, every pytorchcv model, every transformers vision model type; the
    suites without a larger registry give their sweep."""
    found: list[str] = []
    for suite in suites:
        if suite == "torchvision":
            found += [*torchvision.models.list_models(), *VARIANTS]
        else:
            module = SUITE_MODULES[suite]
            found += module.every_name() if hasattr(module, "every_name") else module.names()
    return found


def not_swept(name: str) -> str:
    """Why a model is reported without running it ("" where it runs): a known limitation, or no adaptive pool."""
    if name in KNOWN_LIMITATIONS:
        return KNOWN_LIMITATIONS[name]
    if suite_of(name) == "pytorchcv" and pytorchcv_suite.not_swept(name):
        return pytorchcv_suite.not_swept(name)
    return ""


def declared_size(name: str, model: nn.Module) -> tuple[int, int] | None:
    """The input (height, width) the model's library declares for it, for the census (None where it declares none)."""
    suite = suite_of(name)
    if suite == "pytorchcv":
        return pytorchcv_suite.declared_size(model)
    if suite in ("timm", "transformers"):
        own = SUITE_MODULES[suite].own_size(name)
        return (own, own)
    if suite == "torchvision":
        native = native_size(name)
        return (native, native) if native else None
    return None


def cost(name: str, shape: Sequence[int]) -> float:
    """An estimate of a case's run time, for ordering only: parameters x input elements (census)."""
    elements = 1
    for n in shape:
        elements *= n
    return float(max(registry.entry(name).params, 1)) * elements


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    """The model a sweep name stands for, in eval mode, without pretrained weights (``shape``: the
    input it will get, for the few timm models that are built for one size)."""
    suite = suite_of(name)
    if suite != "torchvision":
        return SUITE_MODULES[suite].build(name, shape)
    if name in VARIANTS:
        return VARIANTS[name]().eval()
    options = dict(OVERRIDES.get(name, {}))
    if name.startswith("quantized_"):
        options.setdefault("quantize", False)
    return build_torchvision(name, **options)


def has_adaptive_pool(name: str) -> bool:
    """Whether the model holds an adaptive pool, as a module or called from a module's source."""
    try:
        with torch.device("meta"):  # nothing is allocated
            model = build(name)
    except NotImplementedError:  # a few builders read tensor values while initialising
        model = build(name)
    return holds_a_pool(model)


@functools.cache
def _calls_a_pool(cls: type) -> bool:
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch.nn") or klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if any(marker in source for marker in POOL_SOURCE_MARKERS):
            return True
    return False


def holds_a_pool(model: nn.Module) -> bool:
    """Whether one of the model's modules is an adaptive pool or has a class whose source calls one."""
    return any(describe_module(m) is not None or _calls_a_pool(type(m)) for m in model.modules())


def native_size(name: str) -> int | None:
    """The input size the model's published weights were evaluated at, when the registry says."""
    if name in VARIANTS:
        return None
    try:
        weights = list(torchvision.models.get_model_weights(name))
    except (KeyError, ValueError):
        return None
    keywords = getattr(weights[0].transforms, "keywords", {}) if weights else {}
    size = keywords.get("crop_size", keywords.get("resize_size"))
    if isinstance(size, (tuple, list)):
        size = size[0]
    return int(size) if size else None


def input_shapes(name: str, sizes: Sequence[int] | None, with_native: bool) -> list[tuple[int, ...]]:
    """The input shapes to sweep ((1, 3, S, S) for images), or the model's one fixed shape. ``sizes`` None:
    the suite's own (torchvision 160 and 320; timm and transformers the model's own size and a second;
    smp 320 and 512; MONAI two volumes)."""
    suite = suite_of(name)
    if suite != "torchvision":
        return SUITE_MODULES[suite].shapes(name, list(sizes) if sizes else None)
    if name in INPUT_SHAPES:
        return [INPUT_SHAPES[name]]
    chosen = list(sizes or TORCHVISION_SIZES)
    native = native_size(name) if with_native else None
    if native and native not in chosen:
        chosen.append(native)
    return [(1, 3, s, s) for s in chosen]
