"""The transformers suite: every vision model family of Hugging Face transformers whose modules hold an adaptive pool.

Names are ``hf/MODEL_TYPE`` (the model type of transformers' auto classes: ``hf/resnet``) or
``hf/MODEL_TYPE:VARIANT`` for a configuration the defaults do not reach (``hf/upernet:swin``). Every
model is built from its configuration with random weights (``Class(Config(...))``): nothing is
downloaded.

:data:`FAMILIES` was chosen by inspection (:func:`discover`: every model type of transformers'
image-classification, semantic-segmentation, depth-estimation and backbone auto mappings, built
from its default configuration on the meta device; kept where a module is an adaptive pool or a
module class's source calls one, with the first task in that order). A slow test re-runs the
inspection and fails when the installed transformers gains or loses a family, so the table cannot
fall behind silently. :data:`VARIANTS` adds the configurations where the pools are (UperNet on the
ConvNext and Swin backbones, BEiT's segmentation head, PVTv2's linear attention).

Sizes: the model's own (``config.image_size``, else 224) and a second one that makes the pools
uneven (own + 26; :data:`SECOND_SIZE` where a model needs a multiple of its patch or window).
Models with position tables for one size are built for the size they run at (:data:`BUILT_FOR_SIZE`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

PREFIX = "hf/"

# model type -> the class swept for it (discovered; see the module docstring).
FAMILIES: dict[str, str] = {
    "bit": "BitForImageClassification",
    "data2vec-vision": "Data2VecVisionForSemanticSegmentation",
    "donut-swin": "DonutSwinForImageClassification",
    "efficientnet": "EfficientNetForImageClassification",
    "focalnet": "FocalNetForImageClassification",
    "hgnet_v2": "HGNetV2ForImageClassification",
    "hiera": "HieraForImageClassification",
    "maskformer-swin": "MaskFormerSwinBackbone",
    "mobilenet_v1": "MobileNetV1ForImageClassification",
    "mobilenet_v2": "MobileNetV2ForSemanticSegmentation",
    "mobilevit": "MobileViTForSemanticSegmentation",
    "mobilevitv2": "MobileViTV2ForSemanticSegmentation",
    "pp_lcnet": "PPLCNetForImageClassification",
    "pp_lcnet_v3": "PPLCNetV3Backbone",
    "pp_lcnet_v4": "PPLCNetV4Backbone",
    "regnet": "RegNetForImageClassification",
    "resnet": "ResNetForImageClassification",
    "swin": "SwinForImageClassification",
    "swinv2": "Swinv2ForImageClassification",
    "textnet": "TextNetForImageClassification",
    "timm_wrapper": "TimmWrapperForImageClassification",
    "upernet": "UperNetForSemanticSegmentation",
}
# Families found but not swept, each with its reason (reported as skips by the zoo).
KNOWN_LIMITATIONS: dict[str, str] = {
    "hf/timm_wrapper": "TimmWrapper wraps a timm model named in its config (pretrained weights from the hub); "
    "the timm suite sweeps timm's models themselves",
}


def _upernet(backbone: str) -> Any:
    import transformers

    stages = ["stage1", "stage2", "stage3", "stage4"]
    if backbone == "convnext":  # the default ConvNextConfig's tuples trip ConvNextBackbone: lists, as the hub configs have
        config = transformers.ConvNextConfig(hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3], out_features=stages)
    else:
        config = transformers.SwinConfig(out_features=stages)
    return transformers.UperNetConfig(backbone_config=config)


# name -> (class, the configuration built from the input size S), beyond the families' defaults.
VARIANTS: dict[str, tuple[str, Callable[[int], Any]]] = {
    "upernet:convnext": ("UperNetForSemanticSegmentation", lambda size: _upernet("convnext")),
    "upernet:swin": ("UperNetForSemanticSegmentation", lambda size: _upernet("swin")),
    "beit:segmentation": ("BeitForSemanticSegmentation", lambda size: _config("beit", out_indices=[3, 5, 7, 11], image_size=size)),
    "pvt_v2:linear_attention": ("PvtV2ForImageClassification", lambda size: _config("pvt_v2", linear_attention=True)),
}
# The second size where own + 26 does not run (patch and window arithmetic).
SECOND_SIZE: dict[str, int] = {
    "hf/data2vec-vision": 320,
    "hf/beit:segmentation": 320,
    "hf/hiera": 256,
    "hf/upernet:convnext": 256,  # ConvNext floors 250 to the same 7x7 as 224; 256 gives 8x8 (8 -> 3, 6)
}
# The default set's one shape for the models that are slow to export (the sweep takes both sizes).
DEFAULT_SHAPES: dict[str, tuple[int, ...]] = {"hf/upernet:convnext": (1, 3, 256, 256)}
# Models whose position tables are built for one input size: built for the size they run at.
BUILT_FOR_SIZE: dict[str, Callable[[int], dict[str, Any]]] = {
    "hf/data2vec-vision": lambda size: {"image_size": size},
    "hf/hiera": lambda size: {"image_size": [size, size]},
}
SIZE_STEP = 26
DEFAULT = ("hf/upernet:convnext", "hf/mobilenet_v2")
TASKS = ("semantic-segmentation", "image-classification", "depth-estimation", "backbone")


def names() -> list[str]:
    return [PREFIX + family for family in FAMILIES] + [PREFIX + variant for variant in VARIANTS]


def _config(model_type: str, **overrides: Any) -> Any:
    import transformers

    return transformers.AutoConfig.for_model(model_type, **overrides)


def _parse(name: str) -> tuple[str, str]:
    """(the class name, the key of FAMILIES or VARIANTS)."""
    key = name[len(PREFIX) :]
    return (VARIANTS[key][0] if key in VARIANTS else FAMILIES[key]), key


def own_size(name: str) -> int:
    _, key = _parse(name)
    config = VARIANTS[key][1](224) if key in VARIANTS else _config(key)
    size = getattr(config, "image_size", None) or 224
    return int(size[0] if isinstance(size, (list, tuple)) else size)


def sizes(name: str) -> list[int]:
    own = own_size(name)
    return [own, SECOND_SIZE.get(name, own + SIZE_STEP)]


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    return [(1, 3, s, s) for s in (chosen or sizes(name))]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    import transformers

    class_name, key = _parse(name)
    size = shape[-1] if shape is not None else own_size(name)
    if key in VARIANTS:
        config = VARIANTS[key][1](size)
    else:
        config = _config(key, **(BUILT_FOR_SIZE[name](size) if name in BUILT_FOR_SIZE else {}))
    return getattr(transformers, class_name)(config).eval()


def discover(holds_a_pool: Callable[[nn.Module], bool]) -> dict[str, str]:
    """Every model type of the vision auto mappings whose default model holds an adaptive pool: its class.

    Models that cannot be built from their default configuration (a missing optional package, a
    configuration that must name its backbone) are left out here; :data:`VARIANTS` covers those
    that matter.
    """
    import transformers
    from transformers.models.auto import modeling_auto

    mappings = {
        "semantic-segmentation": modeling_auto.MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES,
        "image-classification": modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
        "depth-estimation": modeling_auto.MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES,
        "backbone": modeling_auto.MODEL_FOR_BACKBONE_MAPPING_NAMES,
    }
    found: dict[str, str] = {}
    for task in TASKS:
        for model_type, class_name in mappings[task].items():
            if model_type in found:
                continue
            class_name = class_name[0] if isinstance(class_name, (list, tuple)) else class_name
            try:
                with torch.device("meta"):
                    model = getattr(transformers, class_name)(_config(model_type))
            except Exception:  # an optional dependency, or a configuration with no default
                continue
            if holds_a_pool(model):
                found[model_type] = class_name
    return dict(sorted(found.items()))
