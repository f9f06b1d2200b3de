"""fxpool.proving: the report's claims rest on what a tracer saw.

A pool the conversion cannot see (one a forward calls only while tracing, or whose call the conversion
fails to match) is what the tracer finds: the report gets a record left to PyTorch naming the tracer,
``stands_alone`` is false and ``strict=True`` refuses. Then the peers' table of spellings × batch
shapes: each spelling, converted with ``strict=True``, is claimed to stand alone, and plain TorchScript
and dynamo exports of it hold no adaptive pool op and match onnxruntime (rtol 1e-4, atol 1e-5 × the
output's scale); ``torch.export`` of it holds no pool op and matches eager. A batch of 0 under the
TorchScript exporter is refused with a ``PoolCallError``, never a crashed process.
"""

from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxpool
from fxpool import calls
from fxpool.example import read_example
from fxpool.proving import DISPATCH_TRACER, JIT_TRACER, traced_pools


class PoolsOnlyWhileTracing(nn.Module):
    """Calls another pool under torch.jit.trace: the eager recording never sees it, the exporter does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_tracing():
            return F.adaptive_avg_pool2d(x, (5, 4))[..., :3]
        return F.adaptive_avg_pool2d(x, (5, 3))


class SizesReadOffTheInput(nn.Module):
    """pytorchcv DiCENet's SpatialDiceBranch: an output size read off ``x.size()`` (0-d tensors when traced)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.size()[2:]
        x = x.transpose(1, 2)
        if height != 5:
            x = F.adaptive_avg_pool2d(x, output_size=(5, width))
        return x.transpose(1, 2)


def test_a_converted_model_is_proven_by_the_torchscript_tracer() -> None:
    x = torch.randn(2, 3, 13, 11)
    report = fxpool.report_of(fxpool.convert(nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveMaxPool2d((5, 3))), x))
    assert report.proved_by == JIT_TRACER and report.stands_alone and len(report.records) == 1
    assert "checked by torch.jit.trace" in report.summary()


def test_a_pool_the_conversion_never_saw_is_found_and_fails_strict() -> None:
    x = torch.randn(1, 3, 13, 11)
    with pytest.warns(fxpool.UnconvertedPoolWarning):
        converted = fxpool.convert(PoolsOnlyWhileTracing(), x)
    report = fxpool.report_of(converted)
    left = [r for r in report.records if r.form == "traced"]
    assert len(left) == 1 and not report.stands_alone
    assert left[0].op == "aten::adaptive_avg_pool2d" and left[0].input_shape == (1, 3, 13, 11)
    assert left[0].output_shape == (1, 3, 5, 4)
    assert JIT_TRACER in left[0].reason
    with pytest.raises(fxpool.UnconvertedPoolError, match="aten::adaptive_avg_pool2d"):
        fxpool.convert(PoolsOnlyWhileTracing(), x, strict=True)


def test_sizes_read_off_the_input_are_matched_and_a_miss_would_be_caught(monkeypatch) -> None:
    x = torch.randn(1, 3, 13, 11)
    report = fxpool.report_of(fxpool.convert(SizesReadOffTheInput(), x, strict=True))
    assert report.stands_alone and [r.form for r in report.records] == ["functional"]
    # Without the matching of traced sizes, the tracer still meets PyTorch's pool: the proof says so.
    monkeypatch.setattr(calls, "_traced_ints", lambda size: size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxpool.UnconvertedPoolWarning)
        report = fxpool.report_of(fxpool.convert(SizesReadOffTheInput(), x))
    assert not report.stands_alone and [r.form for r in report.records] == ["functional", "traced"]


class DictWithText(nn.Module):
    """An output torch.jit.trace cannot hold (a string): the dispatch run proves it instead."""

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        return {"pooled": torch.ops.aten.adaptive_avg_pool2d.default(x, [5, 3]), "name": "pooled"}


def test_where_the_torchscript_tracer_cannot_trace_an_aten_dispatch_run_proves_it() -> None:
    x = torch.randn(1, 3, 13, 11)
    proof = traced_pools(nn.AdaptiveAvgPool2d((5, 3)), read_example(x))
    assert proof.tracer == JIT_TRACER and [p.op for p in proof.pools] == ["aten::adaptive_avg_pool2d"]
    assert proof.pools[0].input_shape == (1, 3, 13, 11) and proof.pools[0].output_shape == (1, 3, 5, 3)
    assert traced_pools(DictWithText(), read_example(x)).tracer == DISPATCH_TRACER
    report = fxpool.report_of(fxpool.convert(DictWithText(), x, strict=True))
    assert report.proved_by == DISPATCH_TRACER and report.stands_alone


class Functional(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, (5, 3))


class AtenDefault(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.adaptive_avg_pool2d.default(x, [5, 3])


class AtenPrivate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._adaptive_avg_pool2d(x, [5, 3])


class AtenMax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, (5, 3))


class Area(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(5, 3), mode="area")


class CFunction(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._C._nn.adaptive_avg_pool2d(x, (5, 3))


SPELLINGS = {
    "module": lambda: nn.AdaptiveAvgPool2d((5, 3)),
    "max module": lambda: nn.AdaptiveMaxPool2d((5, 3)),
    "functional": Functional,
    "max functional": AtenMax,
    "torch.ops.aten": AtenDefault,
    "_adaptive_avg_pool2d": AtenPrivate,
    "interpolate area": Area,
    "torch._C._nn": CFunction,
    "read off x.size()": SizesReadOffTheInput,
}
BATCHES = {"batched": (2, 3, 13, 11), "unbatched": (3, 13, 11), "batch 0": (0, 3, 13, 11)}
POOL_OPS = {"AveragePool", "GlobalAveragePool", "MaxPool", "GlobalMaxPool"}


def _onnx(model: nn.Module, x: torch.Tensor, dynamo: bool) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
            assert program is not None
            return program.model_proto.SerializeToString()
        torch.onnx.export(model, (x,), buffer, dynamo=False)
    return buffer.getvalue()


def _adaptive_ops(graph: bytes) -> list[str]:
    import onnx

    return [n.op_type for n in onnx.load_from_string(graph).graph.node if "daptive" in n.op_type or n.domain not in ("", "ai.onnx")]


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling_and_batch_shape_stands_alone_where_claimed(spelling: str, batch: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    x = torch.randn(BATCHES[batch])
    original = SPELLINGS[spelling]()
    try:
        with torch.no_grad():
            expected = original(x)
    except (ValueError, RuntimeError) as error:  # interpolate and x.size()[2:] need a batch axis
        pytest.skip(f"the original refuses this input: {error}")
    converted = fxpool.convert(original, x, strict=True)  # strict: the tracer saw no pool left
    assert fxpool.report_of(converted).stands_alone
    program = torch.export.export(converted, (x,))
    assert not [n for n in program.graph.nodes if "adaptive" in str(n.target)]
    torch.testing.assert_close(program.module()(x), expected, rtol=1e-5, atol=1e-6)
    for dynamo in (False, True):
        if batch == "batch 0" and not dynamo:
            with pytest.raises(fxpool.PoolCallError, match="TorchScript ONNX exporter cannot take an input of shape"):
                _onnx(converted, x, dynamo)
            continue
        graph = _onnx(converted, x, dynamo)
        assert not _adaptive_ops(graph)
        session = ort.InferenceSession(graph)
        got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5 * scale)
