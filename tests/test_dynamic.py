"""fxpool.dynamic in eager: the runtime-size forms against PyTorch at many sizes from one module.

Average: float64 within 1e-12. Max: values bit for bit, gradients (integer upstream gradients, so
sums are exact) at exactly PyTorch's positions, ties and all-``-inf`` windows included. The export
form of the max pool (``-inf`` outside the window, one ReduceMax) is checked here for its values;
tests/test_export.py runs both exporters' graphs in onnxruntime.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import fxpool
from fxpool.dynamic import DynamicAdaptiveAvgPool, DynamicAdaptiveMaxPool

AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
OUTPUTS = [(5,), (1,), (7, 5), (3, None), (None, 4), (2, 3, 4), (1, None, 6)]
SIZES = {
    1: [(1,), (4,), (9,), (31,), (100,)],
    2: [(1, 1), (4, 3), (10, 10), (13, 17), (31, 64), (100, 9)],
    3: [(1, 2, 3), (5, 5, 5), (9, 4, 13)],
}


@pytest.mark.parametrize("out_sizes", OUTPUTS, ids=str)
def test_dynamic_avg_matches_pytorch_at_every_size(out_sizes) -> None:
    module = DynamicAdaptiveAvgPool(out_sizes)
    for spatial in SIZES[len(out_sizes)]:
        x = torch.randn(2, 3, *spatial, dtype=torch.float64)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected = AVG[len(out_sizes)](theirs, out_sizes)
        torch.testing.assert_close(module(ours), expected, rtol=1e-12, atol=1e-12)
        upstream = torch.randn_like(expected)
        module(ours).backward(upstream)
        expected.backward(upstream)
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)


def _assert_max_exact(module: DynamicAdaptiveMaxPool, x: torch.Tensor, out_sizes) -> None:
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = MAX[len(out_sizes)](theirs, out_sizes)
    pooled = module(ours)
    torch.testing.assert_close(pooled, expected, rtol=0, atol=0)
    upstream = torch.randint(-5, 6, expected.shape, generator=torch.Generator().manual_seed(1)).double()
    pooled.backward(upstream)
    expected.backward(upstream)
    assert torch.equal(ours.grad, theirs.grad), (tuple(x.shape), out_sizes)


@pytest.mark.parametrize("out_sizes", OUTPUTS, ids=str)
def test_dynamic_max_matches_pytorch_with_tie_gradients_at_every_size(out_sizes) -> None:
    module = DynamicAdaptiveMaxPool(out_sizes)
    for spatial in SIZES[len(out_sizes)]:
        # {0, 1} values tie in most windows; an all--inf channel makes windows with no finite maximum
        x = torch.randint(0, 2, (2, 3, *spatial), generator=torch.Generator().manual_seed(sum(spatial))).double()
        x[1, 0] = float("-inf")
        _assert_max_exact(module, x, out_sizes)


def test_dynamic_max_exhaustive_small_2d() -> None:
    for in_h, in_w, out_h, out_w in itertools.product(range(1, 7), range(1, 7), (1, 2, 3, 5, 8), (1, 2, 4, 7)):
        x = torch.randint(0, 3, (1, 2, in_h, in_w), generator=torch.Generator().manual_seed(in_h + 7 * in_w)).double()
        _assert_max_exact(DynamicAdaptiveMaxPool((out_h, out_w)), x, (out_h, out_w))


def test_dynamic_max_export_form_gives_the_same_values(monkeypatch) -> None:
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    module = DynamicAdaptiveMaxPool((7, 5))
    for spatial in SIZES[2]:
        x = torch.randn(2, 3, *spatial)
        x[0, 0, 0, 0], x[0, 1] = float("nan"), float("-inf")
        torch.testing.assert_close(module(x), F.adaptive_max_pool2d(x, (7, 5)), rtol=0, atol=0, equal_nan=True)


def test_convert_with_dynamic_replaces_size_dependent_max_pools_and_keeps_channels_last() -> None:
    converted = fxpool.convert(torch.nn.AdaptiveMaxPool2d((7, 5)), torch.randn(1, 3, 10, 10), dynamic=True)
    record = fxpool.explain(torch.nn.AdaptiveMaxPool2d((7, 5)), torch.randn(1, 3, 10, 10), dynamic=True).records[0]
    assert record.converted and record.size_agnostic and record.replacement.startswith("dynamic window maxima")
    x = torch.randn(2, 4, 13, 17).contiguous(memory_format=torch.channels_last)
    pooled = converted(x)
    assert pooled.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(pooled, F.adaptive_max_pool2d(x, (7, 5)), rtol=0, atol=0)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_dynamic_pools_trace_again_with_torch_fx(family: str) -> None:
    module = DynamicAdaptiveAvgPool((7, 5)) if family == "avg" else DynamicAdaptiveMaxPool((7, 5))
    traced = torch.fx.symbolic_trace(module)
    assert "check_input" in traced.code  # a leaf: its size checks stay out of the graph
    native = AVG[2] if family == "avg" else MAX[2]
    for spatial in [(10, 10), (13, 11), (3, 40)]:
        x = torch.randn(1, 2, *spatial)
        torch.testing.assert_close(traced(x), native(x, (7, 5)), rtol=1e-6, atol=1e-6)
