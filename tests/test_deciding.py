"""fxpool.deciding: one decision and one record per site, from planning's guards and rules."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fxpool.copying import structural_copy
from fxpool.deciding import decide, sighting
from fxpool.example import read_example
from fxpool.finding import PoolSite, find_pools
from fxpool.recording import record_pool_calls


def _sites(model: nn.Module, x: torch.Tensor) -> list[PoolSite]:
    recording = record_pool_calls(model, read_example(x))
    return list(find_pools(structural_copy(model), recording).sites)


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x).sum() + F.interpolate(x, scale_factor=0.5, mode="area").sum()


def test_a_pool_gets_its_plan_and_a_record_that_says_what_and_why() -> None:
    pool, area = _sites(Head(), torch.randn(2, 3, 10, 10))
    chosen = decide(pool, dynamic=False)
    assert chosen.replaced and chosen.decision.action == "exact"
    record = chosen.record
    assert record is not None and record.converted and record.kind == "sliding"
    assert record.location == "pool" and record.input_shape == (2, 3, 10, 10) and record.output_shape == (2, 3, 7, 7)
    assert record.output_size == "(7, 7)" and "a stride-1 AvgPool per length" in record.reason and not record.export_branch
    scaled = decide(area, dynamic=False).record
    assert scaled is not None and scaled.output_size == "scale_factor: (5, 5)" and not scaled.size_agnostic


def test_scale_factor_has_no_requested_size_so_dynamic_mode_leaves_it_with_the_reason() -> None:
    _, area = _sites(Head(), torch.randn(2, 3, 10, 10))
    assert sighting(area.call, area.events, area.location).requested is None
    chosen = decide(area, dynamic=True)
    assert not chosen.replaced and chosen.record is not None and "scale_factor" in chosen.record.reason


def test_a_site_left_where_it_is_or_undone_is_left_with_that_reason() -> None:
    pool, _ = _sites(Head(), torch.randn(2, 3, 10, 10))
    undone = decide(pool, dynamic=False, undone="self-check: differed")
    assert not undone.replaced and undone.record is not None and undone.record.reason == "self-check: differed"
    assert undone.record.replacement == "left to PyTorch" and undone.record.export_translated
    left = PoolSite("x:op#0", pool.call, pool.events, left="inside code torch.fx cannot trace")
    record = decide(left, dynamic=False).record
    assert record is not None and not record.converted and record.reason == "inside code torch.fx cannot trace"


def test_an_already_converted_site_is_recorded_as_converted_and_builds_nothing() -> None:
    pool, _ = _sites(Head(), torch.randn(2, 3, 10, 10))
    again = PoolSite("pool", pool.call, pool.events, already="already converted (mean(H,W))")
    chosen = decide(again, dynamic=False)
    assert not chosen.replaced and chosen.record.converted and chosen.record.replacement == "already converted (mean(H,W))"
