"""fxpool.building: replacements put in place, by object wherever held, in tables of intercepted forwards, and at the root."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from models import ExportBranch
from torch import nn

from fxpool.building import build
from fxpool.copying import structural_copy
from fxpool.deciding import decide
from fxpool.example import read_example
from fxpool.finding import find_pools
from fxpool.intercepting import InterceptingForward, PoolCalls
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


def test_a_pool_module_is_swapped_wherever_the_tree_holds_it() -> None:
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


def test_a_functional_call_goes_into_a_table_of_its_module_and_the_pool_module_keeps_its_hooks() -> None:
    model = Pools()
    seen = []
    model.pool.register_forward_hook(lambda module, inputs, output: seen.append(type(module).__name__))
    copy, built = _build(model, torch.randn(1, 3, 9, 9))
    assert isinstance(copy.forward, InterceptingForward) and copy.forward.calls is copy.fxpool_calls
    table = copy.fxpool_calls
    assert isinstance(copy.pool, ExactAdaptivePool) and len(table.replacements) == 1
    assert "forward" not in vars(model) and "fxpool_calls" not in model._modules  # the original untouched
    x = torch.randn(1, 3, 9, 9)
    expected = model(x)
    seen.clear()  # the original's and the recording's calls ran the hook too
    torch.testing.assert_close(copy(x), expected, rtol=1e-5, atol=1e-6)
    assert seen == ["ExactAdaptivePool"]
    assert set(copy.state_dict()) == set(model.state_dict())


def test_a_pool_module_swapped_by_object_keeps_its_hooks() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveMaxPool2d(4))
    seen = []
    model[1].register_forward_hook(lambda module, inputs, output: seen.append(type(module).__name__))
    copy, built = _build(model, torch.randn(1, 3, 9, 9))
    assert isinstance(copy[1], ExactAdaptivePool)
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
    assert not built.changed and built.root is copy and type(copy[1]) is nn.AdaptiveAvgPool2d


def test_the_export_branch_calls_are_in_the_table_too() -> None:
    model = ExportBranch().eval()
    copy, built = _build(model, torch.randn(1, 3, 10, 10))
    assert isinstance(copy.pool, ExactAdaptivePool) and len(copy.fxpool_calls.replacements) == 1


class AtTwoSizes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) + self.pool(x[..., :8, :8])


def test_a_pool_module_called_at_two_sizes_becomes_a_table_by_size_with_its_hooks() -> None:
    model = AtTwoSizes()
    seen = []
    model.pool.register_forward_hook(lambda module, inputs, output: seen.append(type(module).__name__))
    copy, built = _build(model, torch.randn(1, 3, 10, 10))
    assert isinstance(copy.pool, PoolCalls) and len(copy.pool.replacements) == 2
    x = torch.randn(1, 3, 10, 10)
    expected = model(x)
    seen.clear()
    torch.testing.assert_close(copy(x), expected, rtol=1e-5, atol=1e-6)
    assert seen == ["PoolCalls", "PoolCalls"]
