"""Real torchvision models (weights=None): exact outputs, reports, and detectors torch.fx cannot trace."""

from __future__ import annotations

import pytest
import torch
import torchvision

import fxpool
from fxpool import report_of
from fxpool.sizechecks import traced_forms
from model_zoo_checks.census import pool_calls

# (model, input shape, expected replacement kinds, the modules whose forward is intercepted): pool
# modules are swapped by object, functional calls intercepted in the forward that makes them
CASES = [
    ("vgg11", (1, 3, 160, 160), {"sliding": 1}, ()),  # 5x5 -> 7x7: the stock exporter rejects it
    ("alexnet", (1, 3, 320, 320), {"sliding": 1}, ()),  # 9x9 -> 6x6
    ("resnet18", (2, 3, 96, 128), {"mean": 1}, ()),
    ("densenet121", (1, 3, 64, 64), {"mean": 1}, ("",)),  # functional F.adaptive_avg_pool2d in its forward
    ("googlenet", (1, 3, 96, 96), {"mean": 1}, ()),  # its forward reads self.training
    ("mobilenet_v2", (1, 3, 96, 96), {"mean": 1}, ("",)),  # functional
    ("efficientnet_b0", (1, 3, 96, 96), {"mean": 17}, ()),
    ("r3d_18", (1, 3, 4, 56, 56), {"mean": 1}, ()),  # AdaptiveAvgPool3d
]


def _build(name: str) -> torch.nn.Module:
    kwargs = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
    return torchvision.models.get_model(name, weights=None, **kwargs).eval()


@pytest.mark.parametrize("name,shape,kinds,intercepted", CASES, ids=[c[0] for c in CASES])
def test_torchvision_model_converts_exactly(name: str, shape: tuple, kinds: dict, intercepted: tuple) -> None:
    model = _build(name)
    x = torch.randn(shape)
    converted = fxpool.convert(model, x, strict=True)
    report = report_of(converted)
    assert report.counts() == kinds
    assert report.intercepted == intercepted
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-5)
    # the replacements really run: what exporters see calls no native pool (a call made from torchvision's
    # code once passed as fxpool's own, its path sharing torch's prefix, and ran PyTorch's pool unreported)
    with traced_forms():
        assert pool_calls(converted, x) == {}


def test_train_mode_resnet_keeps_its_batchnorm_statistics() -> None:
    model = torchvision.models.resnet18(weights=None).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    converted = fxpool.convert(model, torch.randn(2, 3, 64, 64))
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert model.training and converted.training


@pytest.mark.parametrize("name", ["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_fpn"])
def test_untraceable_detectors_convert_every_pool(name: str) -> None:
    model = torchvision.models.get_model(name, weights=None, weights_backbone=None).eval()
    images = [torch.rand(3, 224, 256)]
    converted = fxpool.convert(model, (images,), strict=True)
    report = report_of(converted)
    # the detector's squeeze-excitation blocks pool by module
    assert report.intercepted == ()
    assert len(report.records) == 8 and not report.unconverted
    with torch.no_grad():
        ours, theirs = converted(images), model(images)
    for key in theirs[0]:
        torch.testing.assert_close(ours[0][key], theirs[0][key], rtol=1e-5, atol=1e-5)
