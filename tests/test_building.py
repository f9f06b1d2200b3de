"""fxpool.building: replacements put in place, in graphs, by object wherever held, and at the root."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from models import ExportBranch
from torch import nn

from fxpool.building import build
from fxpool.copying import graph_of, structural_copy
from fxpool.deciding import decide
from fxpool.example import read_example
from fxpool.finding import find_pools
from fxpool.recording import record_pool_calls
from fxpool.replacements import ExactAdaptivePool


def _build(model: nn.Module, x: torch.Tensor, undone: dict[str, str] | None = None):
    recording = record_pool_calls(model, read_example(x))
    copy = structural_copy(model)
    found = find_pools(copy, recording)
    decisions = [decide(site, dynamic=False, undone=(undone or {}).get(site.location)) for site in found.sites]
    return copy, build(copy, found, decisions, torch.device("cpu"))


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)
        object.__setattr__(self, "again", [self.pool])  # the same pool, also held in a plain list

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x * 2
        return self.again[0](x)


def test_a_pool_module_outside_traced_graphs_is_swapped_wherever_the_tree_holds_it() -> None:
    model = Untraceable()
    copy, built = _build(model, torch.randn(1, 3, 10, 10))
    assert built.changed and built.root is copy
    assert isinstance(copy.pool, ExactAdaptivePool) and copy.again[0] is copy.pool
    assert type(model.pool) is nn.AdaptiveAvgPool2d and model.again[0] is model.pool  # the original untouched
    x = torch.randn(1, 3, 10, 10)
    torch.testing.assert_close(built.root(x), model(x), rtol=1e-5, atol=1e-6)


class Pools(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) + F.adaptive_avg_pool2d(x, 4)


def test_a_traced_graph_is_rewritten_and_installed_and_the_hooks_move_along() -> None:
    model = Pools()
    seen = []
    model.pool.register_forward_hook(lambda module, inputs, output: seen.append(type(module).__name__))
    copy, built = _build(model, torch.randn(1, 3, 9, 9))
    gm = graph_of(copy)
    assert gm is not None and isinstance(copy.pool, ExactAdaptivePool) and gm.get_submodule("pool") is copy.pool
    assert sum(isinstance(m, ExactAdaptivePool) for m in gm.modules()) == 2  # the functional call's too
    seen.clear()  # the recording run called the hook on its own copy
    copy(torch.randn(1, 3, 9, 9))
    assert seen == ["ExactAdaptivePool"]


def test_a_pool_module_swapped_by_object_keeps_its_hooks() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveMaxPool2d(4))
    seen = []
    model[1].register_forward_hook(lambda module, inputs, output: seen.append(type(module).__name__))
    copy, built = _build(model, torch.randn(1, 3, 9, 9))
    assert graph_of(copy) is None and isinstance(copy[1], ExactAdaptivePool)
    seen.clear()
    copy(torch.randn(1, 3, 9, 9))
    assert seen == ["ExactAdaptivePool"]


def test_a_pool_at_the_root_becomes_the_root() -> None:
    model = nn.AdaptiveAvgPool2d(5)
    _, built = _build(model, torch.randn(2, 3, 7))
    assert isinstance(built.root, ExactAdaptivePool) and built.changed


def test_nothing_replaced_leaves_the_copy_as_it_was() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(4))
    copy, built = _build(model, torch.randn(1, 3, 9, 9), undone={"1": "undone"})
    assert not built.changed and built.root is copy and graph_of(copy) is None and type(copy[1]) is nn.AdaptiveAvgPool2d


def test_an_export_twin_runs_the_very_replacement_of_its_eager_call() -> None:
    copy, built = _build(ExportBranch(), torch.randn(1, 3, 10, 10))
    eager_graph = graph_of(copy)
    assert eager_graph is not None
    export_graph = copy.forward.export
    eager_pools = [m for m in eager_graph.modules() if isinstance(m, ExactAdaptivePool)]
    export_pools = [m for m in export_graph.modules() if isinstance(m, ExactAdaptivePool)]
    assert len(eager_pools) == 1 and len(export_pools) == 2 and eager_pools[0] in export_pools
