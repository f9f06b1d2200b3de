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

``--every-model`` takes every model type of the vision auto mappings (:data:`EVERY_TASKS`), each with the
class of the first task that has it (:func:`vision_classes`), pool or not; a configuration that would
load a pretrained backbone is built with ``use_pretrained_backbone=False``.
"""

from __future__ import annotations

import functools
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
_SCIPY = "its model module imports its loss, which needs scipy (not installed here)"
_NO_DEFAULT = "its default configuration names no backbone (a hub checkpoint's configuration does)"
KNOWN_LIMITATIONS: dict[str, str] = {
    "hf/timm_wrapper": "TimmWrapper wraps a timm model named in its config (pretrained weights from the hub); "
    "the timm suite sweeps timm's models themselves",
    # --every-model: the vision model types that cannot be built from their default configuration here.
    "hf/timm_backbone": "TimmBackbone builds the timm model its config names (none by default); the timm suite sweeps those",
    "hf/beit": "BeitForSemanticSegmentation needs out_indices of four layers: swept as hf/beit:segmentation",
    "hf/dinat": "Dinat needs the natten library (neighbourhood-attention kernels), not installed here",
    "hf/eomt": _SCIPY,
    "hf/eomt_dinov3": _SCIPY,
    "hf/mask2former": _SCIPY,
    "hf/maskformer": _SCIPY,
    "hf/oneformer": _SCIPY,
    "hf/videomt": _SCIPY,
    "hf/llama4": "a multimodal language model: its vision tower takes no image size of its own configuration",
    "hf/mllama": "a multimodal language model: its vision tower takes no image size of its own configuration",
    "hf/pp_ocrv5_server_det": _NO_DEFAULT,
    "hf/pp_ocrv6_medium_det": _NO_DEFAULT,
    "hf/sapiens2": _NO_DEFAULT,
    "hf/vitmatte": "VitMatteConfig's default backbone configuration mixes a tuple and a list (transformers 5.25 cannot build it)",
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
# --every-model: the tasks whose models take one image (pixel_values), in order of preference for a model type's class.
EVERY_TASKS = (
    *TASKS,
    "object-detection",
    "universal-segmentation",
    "instance-segmentation",
    "keypoint-detection",
    "image-matting",
    "masked-image-modeling",
    "image",
)
MAPPINGS = {
    "semantic-segmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "depth-estimation": "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "backbone": "MODEL_FOR_BACKBONE_MAPPING_NAMES",
    "object-detection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "universal-segmentation": "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",
    "instance-segmentation": "MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES",
    "keypoint-detection": "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES",
    "image-matting": "MODEL_FOR_IMAGE_MATTING_MAPPING_NAMES",
    "masked-image-modeling": "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES",
    "image": "MODEL_FOR_IMAGE_MAPPING_NAMES",
}


def names() -> list[str]:
    return [PREFIX + family for family in FAMILIES] + [PREFIX + variant for variant in VARIANTS]


def _mapping(task: str) -> dict[str, Any]:
    from transformers.models.auto import modeling_auto

    return dict(getattr(modeling_auto, MAPPINGS[task]))


@functools.cache
def vision_classes(tasks: tuple[str, ...] = EVERY_TASKS) -> dict[str, str]:
    """Every model type of these tasks' auto mappings, with the class of the first task that has it."""
    found: dict[str, str] = {}
    for task in tasks:
        for model_type, class_name in _mapping(task).items():
            found.setdefault(model_type, class_name[0] if isinstance(class_name, (list, tuple)) else class_name)
    return dict(sorted(found.items()))


def every_name() -> list[str]:
    """Every vision model type of transformers, and the variants (``--every-model``)."""
    return [PREFIX + model_type for model_type in vision_classes()] + [PREFIX + variant for variant in VARIANTS]


def _config(model_type: str, **overrides: Any) -> Any:
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **overrides)
    if getattr(config, "use_pretrained_backbone", False):  # random weights: no download of a backbone's
        config.use_pretrained_backbone = False
    return config


def _parse(name: str) -> tuple[str, str]:
    """(the class name, the key of FAMILIES, VARIANTS or the vision model types)."""
    key = name[len(PREFIX) :]
    if key in VARIANTS:
        return VARIANTS[key][0], key
    return FAMILIES[key] if key in FAMILIES else vision_classes()[key], key


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

    found: dict[str, str] = {}
    for task in TASKS:
        for model_type, class_name in _mapping(task).items():
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
