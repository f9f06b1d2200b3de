"""The timm suite: one model from every timm family (module) whose models hold an adaptive pool, or every model.

Names are ``timm/MODEL`` or ``timm/MODEL:GLOBAL_POOL`` (``resnet18:catavgmax`` builds resnet18 with
``global_pool="catavgmax"``). Every model is built with ``pretrained=False``; timm's pretrained
configs are part of the package, so the model's own input size is known without a download.

:data:`FAMILIES` was chosen by inspection (``discover_families``: every model of every family
built on the meta device; the smallest real model of each family with an adaptive pool module or a
module class whose source calls one). A slow test re-runs that inspection and fails when a family
gains or loses pools, so the table cannot fall behind the installed timm silently.

:func:`every_name` is the whole registry (``timm.list_models()``) for ``--every-model``. Models timm
marks as built for one input size (``fixed_input_size`` in their pretrained config) are built with
``img_size=`` at a second size of own + 32, which a patch of 16 or 32 divides.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

PREFIX = "timm/"

# family (timm module) -> the model swept for it.
FAMILIES: dict[str, str] = {
    "byoanet": "halonet_h1",
    "byobnet": "mobileone_s1",
    "convmixer": "convmixer_768_32",
    "convnext": "convnext_zepto_rms",
    "cpubone": "cpubone_nano",
    "csatv2": "csatv2",
    "cspnet": "cs3darknet_focus_s",
    "cspnext": "cspnext_tiny",
    "davit": "davit_tiny",
    "densenet": "densenet121",
    "dla": "dla46x_c",
    "dpn": "dpn48b",
    "edgenext": "edgenext_xx_small",
    "efficientnet": "mobilenetv2_035",
    "efficientvit_mit": "efficientvit_b0",
    "efficientvit_msra": "efficientvit_m0",
    "fasternet": "fasternet_t0",
    "fastvit": "fastvit_t8",
    "focalnet": "focalnet_tiny_srf",
    "gcvit": "gcvit_xxtiny",
    "ghostnet": "ghostnet_050",
    "hardcorenas": "hardcorenas_b",
    "hgnet": "hgnetv2_b0",
    "hrnet": "hrnet_w18_small",
    "inception_next": "inception_next_atto",
    "inception_resnet_v2": "inception_resnet_v2",
    "inception_v3": "inception_v3",
    "inception_v4": "inception_v4",
    "lcnetv2": "lcnetv2_small",
    "lowformer": "lowformer_b0",
    "maxxvit": "maxvit_pico_rw_256",
    "metaformer": "poolformerv2_s12",
    "mobilenetv3": "mobilenetv3_small_050",
    "mobilenetv5": "mobilenetv5_base",
    "mobilevit": "mobilevit_xxs",
    "nasnet": "nasnetalarge",
    "nest": "nest_tiny",
    "nextvit": "nextvit_small",
    "nfnet": "nf_regnet_b0",
    "pnasnet": "pnasnet5large",
    "pvt_v2": "pvt_v2_b2_li",
    "rdnet": "rdnet_tiny",
    "regnet": "regnetx_002",
    "repghost": "repghostnet_050",
    "res2net": "res2next50",
    "resnest": "resnest14d",
    "resnet": "resnet10t",
    "resnetv2": "resnetv2_18",
    "rexnet": "rexnet_100",
    "selecsls": "selecsls42",
    "senet": "legacy_seresnet18",
    "shvit": "shvit_s1",
    "sknet": "skresnet18",
    "starnet": "starnet_s050",
    "swin_transformer_v2_cr": "swinv2_cr_tiny_224",
    "tiny_vit": "tiny_vit_5m_224",
    "vgg": "vgg11",
    "visformer": "visformer_tiny",
    "vision_transformer_sam": "samvit_base_patch16_224",
    "vovnet": "ese_vovnet19b_slim_dw",
    "xception": "legacy_xception",
    "xception_aligned": "xception41p",
}
# Beyond one per family: the most used ones, and every SelectAdaptivePool2d kind on resnet18
# ("fast" pools with mean/amax: nothing for fxpool to do, and the census must agree).
EXTRA = ("efficientnet_b0", "resnet18:max", "resnet18:avgmax", "resnet18:catavgmax", "resnet18:fast")
# The second input size when "own size + 26" does not run (window/patch/stride arithmetic).
SECOND_SIZE: dict[str, int] = {
    "csatv2": 544,
    "dla46x_c": 256,
    "hrnet_w18_small": 256,
    "samvit_base_patch16_224": 256,
    "maxvit_pico_rw_256": 320,
    "gcvit_xxtiny": 256,
    "nest_tiny": 256,
    "visformer_tiny": 256,
    "swinv2_cr_tiny_224": 256,
}
SIZE_STEP = 26  # 224 -> 250: no power of two divides it past 2, so the pools' windows are uneven
FIXED_SIZE_STEP = 32  # models built for one size take img_size=; patches of 16 and 32 divide own + 32
# Marked fixed_input_size by timm but swept at their second size as built (they run there unchanged).
RUN_AS_BUILT = frozenset({"efficientvit_m0", "samvit_base_patch16_224"})
DEFAULT = ("timm/resnet18:catavgmax", "timm/efficientnet_b0")


def names() -> list[str]:
    return [PREFIX + m for m in FAMILIES.values()] + [PREFIX + m for m in EXTRA]


def every_name() -> list[str]:
    """Every architecture timm registers (``--every-model``)."""
    import timm

    return [PREFIX + m for m in timm.list_models()]


def _parse(name: str) -> tuple[str, str | None]:
    model, _, pool = name[len(PREFIX) :].partition(":")
    return model, (pool or None)


def own_size(name: str) -> int:
    import timm

    config = timm.get_pretrained_cfg(_parse(name)[0])
    return int(config.input_size[-1]) if config is not None else 224


def built_for_one_size(name: str) -> bool:
    """Whether timm builds the model for one input size (position tables, windows): it takes ``img_size=``."""
    import timm

    model = _parse(name)[0]
    config = timm.get_pretrained_cfg(model)
    return bool(config is not None and config.fixed_input_size) and model not in RUN_AS_BUILT


def sizes(name: str) -> list[int]:
    model, _ = _parse(name)
    own = own_size(name)
    return [own, SECOND_SIZE.get(model, own + (FIXED_SIZE_STEP if built_for_one_size(name) else SIZE_STEP))]


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    return [(1, 3, s, s) for s in (chosen or sizes(name))]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    import timm

    model, pool = _parse(name)
    options: dict[str, object] = {"pretrained": False}
    if pool is not None:
        options["global_pool"] = pool
    if shape is not None and shape[-1] != own_size(name) and built_for_one_size(name):
        options["img_size"] = shape[-1]
    return timm.create_model(model, **options).eval()


def discover_families(holds_a_pool: Callable[[nn.Module], bool]) -> dict[str, list[str]]:
    """Every timm family with the models of it that hold an adaptive pool (built on the meta device)."""
    import timm

    found: dict[str, list[str]] = {}
    for family in timm.list_modules():
        for model in timm.list_models(module=family):
            with torch.device("meta"):
                built = timm.create_model(model, pretrained=False)
            if holds_a_pool(built):
                found.setdefault(family, []).append(model)
    return found
