"""fxpool.indices: adaptive max pools with ``return_indices=True``, against PyTorch's own kernel.

Indices must be equal (exactly) and values bit-equal (NaN where PyTorch's are), over every input and
output size up to 9 in 1d and up to 6x6 -> 7x7 in 2d, on inputs drawn from a few values so that ties
are the rule, with NaN, +inf and -inf planted; then random 3d sizes, dtypes and channels-last by
hypothesis, and the graphs both ONNX exporters and torch.export make of a converted model (SegNet's
pool-and-unpool pattern) in onnxruntime and eager.
"""

from __future__ import annotations

import io
import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import fxpool
from fxpool.indices import WindowArgmaxPool, window_positions

NAN, INF = float("nan"), float("inf")
NATIVE = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}


def tied(shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values from {-1, 0, 1, 2, NaN, inf, -inf}: ties everywhere, non-finite values in some windows."""
    choices = torch.tensor([-1.0, 0.0, 1.0, 2.0, 2.0, 2.0, NAN, INF, -INF])
    weights = torch.tensor([3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 1.0, 1.0, 1.0])
    picks = torch.multinomial(weights, int(torch.Size(shape).numel()), replacement=True, generator=generator)
    return choices[picks].reshape(shape).to(dtype)


def assert_same(got: tuple[torch.Tensor, torch.Tensor], expected: tuple[torch.Tensor, torch.Tensor]) -> None:
    assert got[1].dtype == torch.int64 and torch.equal(got[1], expected[1]), (got[1], expected[1])
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0, equal_nan=True)  # -inf is not the lowest float


def test_window_positions_are_row_major_and_padded_by_the_last_position() -> None:
    table, span = window_positions((3, 4), (2, 2))  # windows rows [0,2)/[1,3), columns [0,2)/[2,4)
    assert span == 4
    assert table.view(4, 4).tolist() == [[0, 1, 4, 5], [2, 3, 6, 7], [4, 5, 8, 9], [6, 7, 10, 11]]
    table, span = window_positions((5,), (3,))  # windows [0,2) [1,4) [3,5): the short ones repeat their last
    assert span == 3 and table.tolist() == [0, 1, 1, 1, 2, 3, 3, 4, 4]


@pytest.mark.parametrize("dims", [1, 2])
def test_every_small_size_gives_pytorchs_values_and_indices(dims: int) -> None:
    generator = torch.Generator().manual_seed(0)
    limit, out_limit = (9, 10) if dims == 1 else (6, 7)
    for in_sizes in itertools.product(range(1, limit + 1), repeat=dims):
        for out_sizes in itertools.product(range(1, out_limit + 1), repeat=dims):
            x = tied((2, 3) + in_sizes, generator)
            pool = WindowArgmaxPool(in_sizes, out_sizes)
            assert_same(pool.traced_form(x), NATIVE[dims](x, out_sizes, return_indices=True))


@settings(max_examples=60, deadline=None)
@given(
    in_sizes=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 7)),
    out_sizes=st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8)),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
    unbatched=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_3d_sizes_dtypes_and_unbatched_inputs(in_sizes, out_sizes, dtype, unbatched, seed) -> None:
    x = tied((2,) + in_sizes if unbatched else (1, 2) + in_sizes, torch.Generator().manual_seed(seed), dtype)
    assert_same(WindowArgmaxPool(in_sizes, out_sizes).traced_form(x), F.adaptive_max_pool3d(x, out_sizes, return_indices=True))


def test_channels_last_input_keeps_its_layout() -> None:
    x = tied((2, 8, 9, 7), torch.Generator().manual_seed(1)).contiguous(memory_format=torch.channels_last)
    got = WindowArgmaxPool((9, 7), (4, 5)).traced_form(x)
    expected = F.adaptive_max_pool2d(x, (4, 5), return_indices=True)
    assert_same(got, expected)
    assert got[0].is_contiguous(memory_format=torch.channels_last) == expected[0].is_contiguous(memory_format=torch.channels_last)


class SegNetStage(nn.Module):
    """SegNet's pattern: pool with indices, unpool with them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveMaxPool2d((5, 4), return_indices=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = self.pool(self.conv(x))
        return values, indices


def test_a_converted_model_exports_exact_indices_with_every_exporter() -> None:
    ort = pytest.importorskip("onnxruntime")
    x = tied((2, 3, 13, 11), torch.Generator().manual_seed(2))
    model = SegNetStage().eval()
    converted = fxpool.convert(model, x, strict=True)
    report = fxpool.report_of(converted)
    assert report.stands_alone and report.records[0].replacement == "window argmax (values and PyTorch's indices)"
    with torch.no_grad():
        expected = model(x)
        assert_same(converted(x), expected)
        program = torch.export.export(converted, (x,))
        assert not [n for n in program.graph.nodes if "adaptive" in str(n.target)]
        assert_same(program.module()(x), expected)
    for dynamo in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if dynamo:
                onnx_program = torch.onnx.export(converted, (x,), dynamo=True, verbose=False)
                assert onnx_program is not None
                graph = onnx_program.model_proto.SerializeToString()
            else:
                buffer = io.BytesIO()
                torch.onnx.export(converted, (x,), buffer, dynamo=False)
                graph = buffer.getvalue()
        session = ort.InferenceSession(graph)
        values, indices = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        assert_same((torch.from_numpy(values), torch.from_numpy(indices)), expected)


def test_the_gradient_reaches_the_inputs_pytorchs_kernel_picks() -> None:
    x = tied((1, 2, 9, 7), torch.Generator().manual_seed(3)).nan_to_num(nan=5.0).requires_grad_()
    pool = WindowArgmaxPool((9, 7), (4, 3))
    grad = torch.autograd.grad(pool.traced_form(x)[0].clamp(-10, 10).sum(), x)[0]
    expected = torch.autograd.grad(F.adaptive_max_pool2d(x, (4, 3)).clamp(-10, 10).sum(), x)[0]
    torch.testing.assert_close(grad, expected, rtol=0, atol=0)


def test_several_sizes_or_dynamic_leave_the_pool_with_why() -> None:
    with pytest.warns(fxpool.UnconvertedPoolWarning):
        converted = fxpool.convert(SegNetStage(), torch.randn(1, 3, 13, 11), dynamic=True)
    record = fxpool.report_of(converted).records[0]
    assert not record.converted and "dynamic=True and return_indices=True" in record.reason
