"""fxpool.graph_pass: tracing with pools as leaves, finding pool nodes, replacing them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fxpool.graph_pass import ModeDependentForwardError, pool_input, pool_nodes, replace_nodes, trace


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


def test_optional_arguments_traced_as_none_are_guarded() -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return x if mask is None else x * mask

    gm = trace(Masked(), unpassed=("mask",)).graph_module
    x = torch.randn(2)
    torch.testing.assert_close(gm(x), x)
    with pytest.raises(Exception, match="mask"):
        gm(x, torch.zeros(2))
