"""The segmentation_models_pytorch suite: every decoder the installed smp has, on two encoders.

Names are ``smp/ARCH-ENCODER`` (``smp/PSPNet-resnet18``), built with ``encoder_weights=None``.
The encoders are a ResNet and a mobile one; DPT takes only timm encoders, so it gets the timm
builds of the same two (``tu-resnet18``, ``tu-mobilenetv2_100``). The sizes make the pyramid
bins uneven: PSPNet pools 1/2/3/6 over the input / 8 (320 -> 40, 512 -> 64), UPerNet over the
input / 32 (10, 16). ``smp/Unet-resnet18:scse`` adds the decoder's attention blocks (squeeze and
excitation, an adaptive pool each), which the plain Unet lacks.
"""

from __future__ import annotations

from torch import nn

PREFIX = "smp/"
ENCODERS = ("resnet18", "mobilenet_v2")
TIMM_ENCODERS = ("tu-resnet18", "tu-mobilenetv2_100")  # for the architectures that take only those
TIMM_ONLY = frozenset({"DPT"})
VARIANTS = {"scse": {"decoder_attention_type": "scse"}}
EXTRA = ("Unet-resnet18:scse",)
SIZES = (320, 512)
DEFAULT = ("smp/PSPNet-resnet18", "smp/UPerNet-mobilenet_v2")


def architectures() -> list[str]:
    """The class names of every architecture the installed smp registers (Unet, PSPNet, DPT, ...)."""
    import segmentation_models_pytorch as smp

    return [cls.__name__ for cls in smp.MODEL_ARCHITECTURES_MAPPING.values()]


def names() -> list[str]:
    found = []
    for arch in architectures():
        encoders = TIMM_ENCODERS if arch in TIMM_ONLY else ENCODERS
        found += [f"{PREFIX}{arch}-{encoder}" for encoder in encoders]
    return found + [PREFIX + extra for extra in EXTRA]


def sizes(name: str) -> list[int]:
    return list(SIZES)


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    return [(1, 3, s, s) for s in (chosen or sizes(name))]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    import segmentation_models_pytorch as smp

    spec, _, variant = name[len(PREFIX) :].partition(":")
    arch, _, encoder = spec.partition("-")
    classes = {cls.__name__: cls for cls in smp.MODEL_ARCHITECTURES_MAPPING.values()}
    options = dict(VARIANTS[variant]) if variant else {}
    return classes[arch](encoder_name=encoder, encoder_weights=None, classes=3, **options).eval()
