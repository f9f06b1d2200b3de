"""fxpool.finding: every pool site of a copy, by module object or by the module whose forward calls it; no trace."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from models import ExportBranch
from torch import nn

from fxpool.copying import structural_copy
from fxpool.example import read_example
from fxpool.finding import EXPORT_SUFFIX, find_pools
from fxpool.recording import record_pool_calls


def _find(model: nn.Module, x: torch.Tensor):
    recording = record_pool_calls(model, read_example(x))
    copy = structural_copy(model)
    return copy, find_pools(copy, recording)


class Traceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) + F.adaptive_max_pool2d(x, 3)


def test_a_functional_call_is_a_site_of_the_module_whose_forward_makes_it_and_nothing_is_traced() -> None:
    copy, found = _find(nn.Sequential(nn.Conv2d(3, 3, 1), Traceable()), torch.randn(2, 3, 8, 8))
    assert found.intercepted == ("1",)
    assert [s.location for s in found.sites] == ["1.pool", "1:F.adaptive_max_pool2d#0"]
    pool, call = found.sites
    assert pool.module is copy[1].pool and pool.size is None and pool.owner is None
    assert call.owner is copy[1] and call.size == (8, 8) and call.left is None
    assert [s.events[0].input_shape for s in found.sites] == [(2, 3, 8, 8)] * 2


def test_pool_modules_alone_are_sites_by_object() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(3), nn.Sequential(nn.AdaptiveMaxPool2d(2)))
    copy, found = _find(model, torch.randn(2, 3, 8, 8))
    assert found.intercepted == ()
    assert [(s.location, s.module) for s in found.sites] == [("1", copy[1]), ("2.0", copy[2][0])]


class SharedAtTwoSizes(nn.Module):
    """One pool module called at two sizes: each size gets its own replacement."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.down = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) + self.pool(self.down(x))


def test_a_pool_module_called_at_two_sizes_is_one_site_per_size() -> None:
    copy, found = _find(nn.Sequential(SharedAtTwoSizes()), torch.randn(1, 3, 16, 16))
    assert found.intercepted == ()
    assert [(s.location, s.size, s.module is copy[0].pool) for s in found.sites] == [
        ("0.pool#0", (16, 16), True),
        ("0.pool#1", (8, 8), True),
    ]


class Untraceable(nn.Module):
    """A data-dependent branch torch.fx cannot trace, over a pool module in a list and a functional pool."""

    def __init__(self) -> None:
        super().__init__()
        self.pools = nn.ModuleList([nn.AdaptiveAvgPool2d(5)])
        object.__setattr__(self, "loose", [nn.AdaptiveMaxPool2d(2)])  # never registered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x + 1
        return self.pools[0](x).sum() + self.loose[0](x).sum() + F.adaptive_avg_pool2d(x, 3).sum()


def test_code_torch_fx_cannot_trace_gives_module_sites_by_object_and_intercepted_functional_calls() -> None:
    copy, found = _find(Untraceable(), torch.randn(1, 3, 9, 9))
    by_location = {s.location: s for s in found.sites}
    assert set(by_location) == {"pools.0", "loose[0]", "<root>:F.adaptive_avg_pool2d#0"}
    assert by_location["pools.0"].module is copy.pools[0] and by_location["loose[0]"].module is copy.loose[0]
    assert by_location["loose[0]"].events[0].output_shape == (1, 3, 2, 2)
    call = by_location["<root>:F.adaptive_avg_pool2d#0"]
    assert call.left is None and call.owner is copy and found.intercepted == ("",)


def test_an_export_branch_gives_sites_of_its_own_for_the_calls_only_it_makes() -> None:
    _, found = _find(nn.Sequential(nn.Conv2d(3, 3, 1), ExportBranch()), torch.randn(1, 3, 10, 10))
    sites = [(s.location, s.export_branch, s.call_count) for s in found.sites]
    assert sites == [("1.pool", False, 1), ("1:F.interpolate(mode='area')#0" + EXPORT_SUFFIX, True, 1)]


def test_a_scripted_pool_is_a_left_site_with_its_output_size() -> None:
    model = nn.Sequential(nn.AdaptiveMaxPool2d(4), torch.jit.script(nn.AdaptiveAvgPool2d((2, 3))))
    _, found = _find(model, torch.randn(1, 3, 8, 8))
    eager, site = found.sites
    assert eager.location == "0" and eager.left is None
    assert site.location == "1" and site.left is not None and "TorchScript" in site.left
    assert site.call.output_size == (2, 3) and site.call.op == "nn.AdaptiveAvgPool2d"


class CallsTheSharedBlock(nn.Module):
    """Holds a block it never calls (another parent calls the same object), beside a pool it calls."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d(5)
        self.unused = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pool(x).mean()


class FunctionalBlock(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 3) * 2


def test_a_shared_module_first_reached_where_it_is_never_called_is_still_found_by_its_calls() -> None:
    block = FunctionalBlock()
    model = nn.Sequential(CallsTheSharedBlock(block), block)  # the walk meets it as 0.unused first
    copy, found = _find(model, torch.randn(1, 3, 10, 10))
    pool, functional = found.sites
    assert pool.location == "0.pool" and pool.module is not None
    assert functional.left is None and functional.owner is copy[1] and functional.events[0].output_shape == (1, 3, 3, 3)


def test_fxpool_replacements_are_found_as_already_converted() -> None:
    import fxpool

    x = torch.randn(1, 2, 13, 11)
    converted = fxpool.convert(nn.Sequential(nn.AdaptiveMaxPool2d((5, 7)), FunctionalBlock()), x)
    _, found = _find(converted, x)
    assert [(s.location, s.already is not None) for s in found.sites] == [("0", True), ("1.fxpool_calls.replacements.0", True)]
    assert all(s.already.startswith("already converted") for s in found.sites)
