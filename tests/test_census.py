"""The zoo's independent pool count: every spelling counted once, and a disagreement with the report caught."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import fxpool
from model_zoo_checks import zoo
from model_zoo_checks.census import pool_calls


class EverySpelling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.average = nn.AdaptiveAvgPool2d(3)
        self.maximum = nn.AdaptiveMaxPool2d((2, None), return_indices=True)
        self.area = nn.Upsample(size=4, mode="area")

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [
            self.average(x),
            self.average(x),
            self.maximum(x)[0],
            self.area(x),
            F.interpolate(x, scale_factor=0.5, mode="area"),
            F.interpolate(x, size=3),  # nearest: not a pool
            F.adaptive_max_pool2d(x, 3),
            F.adaptive_max_pool2d(x, 3, return_indices=True)[0],
            torch.adaptive_avg_pool1d(x[0], 3),
            torch._C._nn.adaptive_avg_pool2d(x, 1),
            F.adaptive_avg_pool3d(x[None], 2),
            torch.adaptive_max_pool1d(x[0], 2)[0],
        ]


def test_every_spelling_is_counted_once() -> None:
    calls = pool_calls(EverySpelling(), torch.randn(1, 4, 10, 10))
    assert calls == {
        "adaptive_avg_pool2d": 3,
        "adaptive_max_pool2d": 3,
        "interpolate(area)": 2,
        "adaptive_avg_pool1d": 1,
        "adaptive_avg_pool3d": 1,
        "adaptive_max_pool1d": 1,
    }


def _traced_calls(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """What the zoo counts of a converted model: the forms exporters see (eager runs PyTorch's kernel
    for uneven windows, which would count as pools)."""
    from fxpool.sizechecks import traced_forms

    with traced_forms():
        return pool_calls(model, x)


def test_the_converted_model_calls_only_the_pools_the_report_leaves_and_the_census_agrees() -> None:
    model, x = EverySpelling().eval(), torch.randn(1, 4, 10, 10)
    converted = fxpool.convert(model, x)
    report = fxpool.report_of(converted)
    case = zoo.Case(
        "every_spelling",
        tuple(x.shape),
        pool_calls=pool_calls(model, x),
        pool_calls_converted=_traced_calls(converted, x),
        pools=len(report.records),
        unconverted=len(report.unconverted),
        reported_calls=sum(r.calls for r in report.records),
        reported_calls_left=sum(r.calls for r in report.unconverted),
    )
    # every spelling converted, the three that return argmax indices too (the window argmax form)
    assert case.pool_calls_converted == {}
    assert sum(case.pool_calls.values()) == 11 and case.unconverted == 0
    assert zoo._census_disagreement(case) == ""


def test_a_report_that_misses_a_pool_or_leaves_one_silently_is_caught() -> None:
    missed = zoo.Case("m", (1, 3, 8, 8), pool_calls={"adaptive_avg_pool2d": 2}, pools=1, reported_calls=1)
    assert "the original calls 2 adaptive pools" in zoo._census_disagreement(missed)
    left = zoo.Case(
        "m",
        (1, 3, 8, 8),
        pool_calls={"adaptive_avg_pool2d": 1},
        pools=1,
        pool_calls_converted={"adaptive_avg_pool2d": 1},
        unconverted=0,
        reported_calls=1,
    )
    assert "still calls 1 adaptive pools" in zoo._census_disagreement(left)
