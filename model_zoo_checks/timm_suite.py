"""The timm suite: one model from every timm family (module) whose models hold an adaptive pool.

Names are ``timm/MODEL`` or ``timm/MODEL:GLOBAL_POOL`` (``resnet18:catavgmax`` builds resnet18 with
``global_pool="catavgmax"``). Every model is built with ``pretrained=False``; timm's pretrained
configs are part of the package, so the model's own input size is known without a download.

:data:`FAMILIES` was chosen by inspection (``discover_families``: every model of every family
built on the meta device; the smallest real model of each family with an adaptive pool module or a
module class whose source calls one). A slow test re-runs that inspection and fails when a family
gains or loses pools, so the table cannot fall behind the installed timm silently.
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
# Models timm builds for one input size: built with img_size= at their second size.
BUILT_FOR_ONE_SIZE = frozenset({"maxvit_pico_rw_256", "gcvit_xxtiny", "nest_tiny", "visformer_tiny", "swinv2_cr_tiny_224"})
SIZE_STEP = 26  # 224 -> 250: no power of two divides it past 2, so the pools' windows are uneven
DEFAULT = ("timm/resnet18:catavgmax", "timm/efficientnet_b0")


def names() -> list[str]:
    return [PREFIX + m for m in FAMILIES.values()] + [PREFIX + m for m in EXTRA]


def _parse(name: str) -> tuple[str, str | None]:
    model, _, pool = name[len(PREFIX) :].partition(":")
    return model, (pool or None)


def own_size(name: str) -> int:
    import timm

    config = timm.get_pretrained_cfg(_parse(name)[0])
    return int(config.input_size[-1]) if config is not None else 224


def sizes(name: str) -> list[int]:
    model, _ = _parse(name)
    own = own_size(name)
    return [own, SECOND_SIZE.get(model, own + SIZE_STEP)]


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    return [(1, 3, s, s) for s in (chosen or sizes(name))]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    import timm

    model, pool = _parse(name)
    options: dict[str, object] = {"pretrained": False}
    if pool is not None:
        options["global_pool"] = pool
    if model in BUILT_FOR_ONE_SIZE and shape is not None and shape[-1] != own_size(name):
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
