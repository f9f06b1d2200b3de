"""fxpool.graph_pass: tracing with pools as leaves, finding pool nodes, replacing them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fxpool.graph_pass import (
    ModeDependentForwardError,
    asks_export_flag,
    pool_input,
    pool_nodes,
    reads_training_flag,
    replace_nodes,
    trace,
)


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(self.conv(x))
        return y + F.adaptive_max_pool2d(x, 7).sum()


def test_pools_are_leaves_and_every_spelling_is_a_pool_node() -> None:
    traced = trace(Head())
    nodes = pool_nodes(traced.graph_module)
    assert [n.call.op for n in nodes] == ["nn.AdaptiveAvgPool2d", "F.adaptive_max_pool2d"]
    assert [n.node.op for n in nodes] == ["call_module", "call_function"]
    assert pool_input(nodes[0].node).target == "conv" and pool_input(nodes[1].node).op == "placeholder"


def test_replace_nodes_keeps_a_pool_module_name_and_mirrors_the_replacement() -> None:
    model = Head()
    gm = trace(model).graph_module
    nodes = pool_nodes(gm)
    swap = {nodes[0].node: nn.Identity(), nodes[1].node: nn.Identity()}
    mirror = Head()
    result = replace_nodes(gm, swap, mirror=mirror)
    assert result.modified and len(result.replaced) == 2
    assert isinstance(gm.pool, nn.Identity) and isinstance(mirror.pool, nn.Identity)
    names = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    assert "pool" in names and any(str(name).startswith("fxpool_") for name in names)
    x = torch.randn(1, 3, 7, 7)
    torch.testing.assert_close(gm(x), model.conv(x) + x.sum())


class Flagged(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, 0.5, training=self.training)


def test_a_forward_that_reads_the_training_flag_is_not_traced() -> None:
    with pytest.raises(ModeDependentForwardError, match="reads self.training"):
        trace(Flagged())


class FlaggedElsewhere(nn.Module):
    """Reads the flag in a property and a helper method, not in forward; asks the export flag in a classmethod."""

    @property
    def noisy(self) -> bool:
        return self.training

    def scale(self) -> float:
        return 0.5 if self.training else 1.0

    @classmethod
    def exporting(cls) -> bool:
        return torch.onnx.is_in_onnx_export()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale()


def test_the_flags_are_found_in_any_method_the_class_defines() -> None:
    assert reads_training_flag(FlaggedElsewhere()) and asks_export_flag(FlaggedElsewhere())
    assert reads_training_flag(Flagged()) and not asks_export_flag(Flagged())
    assert not reads_training_flag(Head()) and not asks_export_flag(Head())


def test_optional_arguments_traced_as_none_are_guarded() -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return x if mask is None else x * mask

    gm = trace(Masked(), unpassed=("mask",)).graph_module
    x = torch.randn(2)
    torch.testing.assert_close(gm(x), x)
    with pytest.raises(Exception, match="mask"):
        gm(x, torch.zeros(2))
