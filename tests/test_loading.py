"""fxpool.loading: MODEL specs of the command line, built without downloading anything."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fxpool.loading import ModelSpecError, build_torchvision, load_model


def test_torchvision_models_are_built_without_weights_in_eval_mode() -> None:
    model = load_model("torchvision:alexnet")
    assert isinstance(model, nn.Module) and not model.training
    detector = build_torchvision("fasterrcnn_mobilenet_v3_large_320_fpn")  # weights_backbone=None as well
    assert not detector.training


def test_module_and_file_specs(tmp_path) -> None:
    assert isinstance(load_model("torch.nn:Identity"), nn.Identity)
    source = tmp_path / "mine.py"
    source.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(3))\n")
    model = load_model(f"{source}:build")
    assert model(torch.randn(1, 2, 7, 7)).shape == (1, 2, 3, 3) and not model.training


@pytest.mark.parametrize(
    "spec,message",
    [("alexnet", "expected torchvision:NAME"), ("torchvision:nope", "no model 'nope'"), ("/no/such.py:build", "no file")],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=message):
        load_model(spec)
