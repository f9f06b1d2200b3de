"""fxpool.recording: one side-effect-free forward pass that sees every pool call and its sizes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fxpool.example import read_example
from fxpool.recording import record_pool_calls


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(3)
        self.heads = nn.ModuleList([nn.AdaptiveAvgPool2d(7), nn.AdaptiveMaxPool2d(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(x)
        pooled = [head(x).flatten(1) for head in self.heads]
        return torch.cat(pooled + [F.interpolate(x, size=5, mode="area").flatten(1), torch.rand(1, 1)], 1)


def test_every_call_with_its_shapes_and_scope_and_nothing_changed() -> None:
    model = Net().train()
    before = model.bn.running_mean.clone()
    example = read_example(torch.randn(1, 3, 10, 10), None)
    rng = torch.random.get_rng_state()
    recording = record_pool_calls(model, example)  # the model draws torch.rand: the caller's RNG is restored
    assert torch.equal(model.bn.running_mean, before) and torch.equal(torch.random.get_rng_state(), rng)
    ops = [(e.call.op, e.module_name, e.input_shape, e.output_shape) for e in recording.events]
    assert ops == [
        ("nn.AdaptiveAvgPool2d", "heads.0", (1, 3, 10, 10), (1, 3, 7, 7)),
        ("nn.AdaptiveMaxPool2d", "heads.1", (1, 3, 10, 10), (1, 3, 3, 3)),
        ("F.interpolate(mode='area')", None, (1, 3, 10, 10), (1, 3, 5, 5)),
    ]
    assert recording.events[2].innermost == "" and recording.events[0].spatial_dims == 2
    assert recording.output is not None and not recording.output.requires_grad
