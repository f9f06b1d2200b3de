"""fxpool.calls through convert: every max-family spelling is found, converted where only values are
used, left (with the reason) where PyTorch's indices are returned; the converted model equal to the
original bit for bit, at the example size and at a second one (equal, or fxpool's size error)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxpool


class Calls(nn.Module):
    def __init__(self, pool) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(x)
        return pooled[0] if isinstance(pooled, tuple) else pooled


# name: (the call, input shape, converted, recorded op)
SPELLINGS = {
    "F.adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 4), (2, 3, 10), True, "F.adaptive_max_pool1d"),
    "F.adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (4, 3)), (2, 3, 10, 7), True, "F.adaptive_max_pool2d"),
    "F.adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, 3), (2, 3, 5, 7, 4), True, "F.adaptive_max_pool3d"),
    "keywords": (lambda x: F.adaptive_max_pool2d(input=x, output_size=4), (2, 3, 10, 7), True, "F.adaptive_max_pool2d"),
    "None entry": (lambda x: F.adaptive_max_pool2d(x, (None, 3)), (2, 3, 10, 7), True, "F.adaptive_max_pool2d"),
    "return_indices=True": (
        lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True),
        (2, 3, 10, 7),
        True,
        "F.adaptive_max_pool2d_with_indices",
    ),
    "F.*_with_indices": (
        lambda x: F.adaptive_max_pool2d_with_indices(x, 4),
        (2, 3, 10, 7),
        True,
        "F.adaptive_max_pool2d_with_indices",
    ),
    "torch.adaptive_max_pool1d": (lambda x: torch.adaptive_max_pool1d(x, 4), (2, 3, 10), True, "torch.adaptive_max_pool1d"),
    "torch._C._nn.adaptive_max_pool2d": (
        lambda x: torch._C._nn.adaptive_max_pool2d(x, (4, 4)),
        (2, 3, 10, 7),
        True,
        "torch._C._nn.adaptive_max_pool2d",
    ),
    "nn.AdaptiveMaxPool2d": (nn.AdaptiveMaxPool2d(4), (2, 3, 10, 7), True, "nn.AdaptiveMaxPool2d"),
    "torch.ops.aten": (
        lambda x: torch.ops.aten.adaptive_max_pool2d.default(x, [4, 3]),
        (2, 3, 10, 7),
        True,
        "torch.ops.aten.adaptive_max_pool2d.default",
    ),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_max_spelling_goes_through_convert(spelling: str) -> None:
    call, shape, converted, op = SPELLINGS[spelling]
    model = Calls(call)
    x = torch.randn(shape)
    result = fxpool.convert(model, x)
    (record,) = fxpool.report_of(result).records
    assert (record.converted, record.op, record.family) == (converted, op, "max")
    if "indices" in op or op.startswith(("torch.", "torch._C")):  # these return (values, indices): the argmax form
        assert record.kind == "argmax"
    torch.testing.assert_close(result(x), model(x), rtol=0, atol=0)
    other = torch.randn(*shape[:-1], shape[-1] + 3)
    try:
        torch.testing.assert_close(result(other), model(other), rtol=0, atol=0)
    except fxpool.SpatialSizeError:
        assert record.converted and not record.size_agnostic


def test_a_global_pool_is_one_the_model_asks_for_output_size_one_on_every_axis() -> None:
    from fxpool.calls import PoolCall

    def call(output_size, dynamic: bool = False) -> PoolCall:
        return PoolCall("avg", 2, "F.adaptive_avg_pool2d", "functional", output_size, dynamic_output_size=dynamic)

    assert call((1, 1)).asks_for_ones and call((1,)).asks_for_ones
    assert not call((None, 1)).asks_for_ones  # 1 only where the input's height is
    assert not call((1, 2)).asks_for_ones and not call(None).asks_for_ones and not call((1, 1), dynamic=True).asks_for_ones


def test_each_record_says_whether_the_model_asks_for_a_global_pool() -> None:
    class TwoPools(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.adaptive_avg_pool2d(x, (1, 1)) + F.adaptive_avg_pool2d(x, (None, 1)).mean(2, keepdim=True)

    report = fxpool.explain(TwoPools(), torch.randn(1, 2, 5, 5))
    assert [r.global_output for r in report.records] == [True, False], report
