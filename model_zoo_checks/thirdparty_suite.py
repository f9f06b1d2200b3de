"""The third-party suite: models from libraries users install beside timm, built offline with random weights.

Names are ``thirdparty/LIBRARY-MODEL`` (``thirdparty/efficientnet_pytorch-b0``). Each entry names the
package it needs; :func:`names` lists those whose package is installed, so the suite runs with what is
there (``pip install ".[thirdparty]"`` brings efficientnet_pytorch; facenet-pytorch pins torch<2.3, so it
goes in with ``pip install --no-deps facenet-pytorch``, after which it imports and builds here).

- efficientnet_pytorch's EfficientNet pools functionally (``F.adaptive_avg_pool2d(x, 1)``) in the
  forward of every ``MBConvBlock``, which reads ``self.training``: fxpool intercepts those calls. Its
  default swish is a custom autograd Function (``MemoryEfficientSwish``) that neither ONNX exporter
  translates, original or converted; the library's own export recipe switches it off
  (``set_swish(memory_efficient=False)``), and so does this suite.
- facenet-pytorch's InceptionResnetV1 ends with an ``nn.AdaptiveAvgPool2d(1)``.

Left out, with the reason (nothing of theirs installs cleanly beside this torch): fastai's heads
(``AdaptiveConcatPool2d``, ``create_head``: ``fastai.layers`` imports pandas, scipy, scikit-learn and
spaCy through ``fastai.imports``), ultralytics' classification models (``ultralytics.nn.tasks`` imports
OpenCV, psutil and polars through ``ultralytics.utils``), torchxrayvision (its package imports
scikit-image, pandas and imageio through its datasets module).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from torch import nn

PREFIX = "thirdparty/"
DEFAULT = ("thirdparty/efficientnet_pytorch-b0",)


def _efficientnet(variant: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from efficientnet_pytorch import EfficientNet

        model = EfficientNet.from_name(f"efficientnet-{variant}")
        model.set_swish(memory_efficient=False)  # the library's export recipe: a plain swish both exporters translate
        return model

    return build


def _facenet() -> nn.Module:
    from facenet_pytorch import InceptionResnetV1

    return InceptionResnetV1(pretrained=None, classify=True, num_classes=8)


# name -> (the package it needs, its builder, its input sizes: the library's own and one no window divides)
MODELS: dict[str, tuple[str, Callable[[], nn.Module], tuple[int, ...]]] = {
    "efficientnet_pytorch-b0": ("efficientnet_pytorch", _efficientnet("b0"), (224, 250)),
    "efficientnet_pytorch-b3": ("efficientnet_pytorch", _efficientnet("b3"), (300, 250)),
    "facenet_pytorch-InceptionResnetV1": ("facenet_pytorch", _facenet, (160, 181)),
}


def names() -> list[str]:
    """The models whose library is installed."""
    return [PREFIX + name for name, (package, _, _) in MODELS.items() if importlib.util.find_spec(package) is not None]


def sizes(name: str) -> list[int]:
    return list(MODELS[name[len(PREFIX) :]][2])


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    return [(1, 3, s, s) for s in (chosen or sizes(name))]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    return MODELS[name[len(PREFIX) :]][1]().eval()
