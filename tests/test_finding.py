"""fxpool.finding: every pool site of a copy, in traced graphs, by module object, or left with its reason."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from models import ExportBranch
from torch import nn

from fxpool.copying import structural_copy
from fxpool.example import read_example
from fxpool.finding import EXPORT_SUFFIX, find_pools
from fxpool.recording import record_pool_calls


def _find(model: nn.Module, x: torch.Tensor, **options):
    recording = record_pool_calls(model, read_example(x))
    copy = structural_copy(model)
    return copy, find_pools(copy, recording, **options)


class Traceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) + F.adaptive_max_pool2d(x, 3)


def test_only_the_caller_of_a_functional_pool_is_traced_and_each_pool_node_is_a_site() -> None:
    copy, found = _find(nn.Sequential(nn.Conv2d(3, 3, 1), Traceable()), torch.randn(2, 3, 8, 8))
    assert found.traced_names == ("1",) and not found.untraceable
    assert [s.location for s in found.sites] == ["1.pool", "1:adaptive_max_pool2d"]
    assert all(s.node is not None and s.traced is found.traced[0] and s.left is None for s in found.sites)
    assert [s.events[0].input_shape for s in found.sites] == [(2, 3, 8, 8)] * 2
    assert found.sites[0].hooks_from is copy[1].pool and found.sites[1].hooks_from is None


def test_pool_modules_alone_need_no_trace_and_are_sites_by_object() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(3), nn.Sequential(nn.AdaptiveMaxPool2d(2)))
    copy, found = _find(model, torch.randn(2, 3, 8, 8))
    assert found.traced == () and found.untraceable == ()
    assert [(s.location, s.module) for s in found.sites] == [("1", copy[1]), ("2.0", copy[2][0])]


class SharedAtTwoSizes(nn.Module):
    """One pool module called at two sizes: its caller is traced, so each call gets its own replacement."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.down = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) + self.pool(self.down(x))


def test_a_pool_module_called_at_two_sizes_gets_its_caller_traced() -> None:
    _, found = _find(nn.Sequential(SharedAtTwoSizes()), torch.randn(1, 3, 16, 16))
    assert found.traced_names == ("0",)
    assert [(s.location, s.events[0].input_shape[-1]) for s in found.sites] == [("0.pool#0", 16), ("0.pool#1", 8)]


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


def test_untraceable_code_gives_module_sites_by_object_and_leaves_functional_calls_with_the_reason() -> None:
    copy, found = _find(Untraceable(), torch.randn(1, 3, 9, 9))
    assert [name for name, _ in found.untraceable] == [""]
    by_location = {s.location: s for s in found.sites}
    assert set(by_location) == {"pools.0", "loose[0]", "<root>:F.adaptive_avg_pool2d#0"}
    assert by_location["pools.0"].module is copy.pools[0] and by_location["loose[0]"].module is copy.loose[0]
    assert by_location["loose[0]"].events[0].output_shape == (1, 3, 2, 2)
    left = by_location["<root>:F.adaptive_avg_pool2d#0"]
    assert left.left is not None and "no usable torch.fx graph" in left.left and "TraceError" in left.left


def test_a_refused_trace_is_visited_below_with_its_reason() -> None:
    _, found = _find(nn.Sequential(nn.Conv2d(3, 3, 1), Traceable()), torch.randn(2, 3, 8, 8), refused_traces={"1": "refused"})
    assert ("1", "refused") in found.untraceable and found.traced_names == ()
    assert [(s.location, s.left is None) for s in found.sites] == [("1.pool", True), ("1:F.adaptive_max_pool2d#0", False)]


def test_an_export_branch_gives_sites_of_its_own_and_twins_of_the_eager_calls() -> None:
    _, found = _find(nn.Sequential(nn.Conv2d(3, 3, 1), ExportBranch()), torch.randn(1, 3, 10, 10))
    assert found.traced_names == ("1",)  # the branching module is traced on its own, once per answer
    (traced,) = found.traced
    assert traced.export_graph is not None and traced.export_graph.code != traced.graph.code
    sites = [(s.location, s.export_branch, s.twin) for s in found.sites]
    assert sites == [
        ("1.pool", False, None),
        ("1.pool" + EXPORT_SUFFIX, True, "1.pool"),
        ("1:interpolate" + EXPORT_SUFFIX, True, None),
    ]


def test_a_module_that_asks_the_export_flag_but_takes_one_path_gets_one_graph() -> None:
    class Asks(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.onnx.is_in_onnx_export()
            return F.adaptive_avg_pool2d(x, 2)

    _, found = _find(Asks(), torch.randn(1, 3, 5, 5))
    assert found.traced[0].export_graph is None and [s.export_branch for s in found.sites] == [False]


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
    _, found = _find(model, torch.randn(1, 3, 10, 10))
    pool, functional = found.sites
    assert pool.location == "0.pool" and pool.module is not None
    assert functional.left is None and functional.node is not None and functional.events[0].output_shape == (1, 3, 3, 3)
