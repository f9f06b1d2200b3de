"""fxpool.intercepting: functional pool calls converted at run time, without a trace, exact under every tracer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxpool
from fxpool.errors import SpatialSizeError, UnsupportedModelError
from fxpool.intercepting import PoolCalls


class SqueezeExcite(nn.Module):
    """Reads self.training and branches on the data: torch.fx cannot trace it; efficientnet_pytorch's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.sum() > 0:
            x = x * 2
        scale = torch.sigmoid(self.conv(F.adaptive_avg_pool2d(x, 1)))
        return x * scale + F.adaptive_max_pool2d(x, (5, 7)).sum() + F.adaptive_avg_pool2d(x, output_size=(5, 7)).mean()


def _converted(**options):
    model, x = SqueezeExcite().eval(), torch.randn(1, 3, 13, 11)
    return model, x, fxpool.convert(model, x, strict=True, **options)


def test_functional_calls_in_untraceable_code_are_replaced_and_the_forward_keeps_its_own_code() -> None:
    model, x, converted = _converted()
    report = fxpool.report_of(converted)
    assert len(report.records) == 3 and report.stands_alone and report.intercepted == ("",)
    assert [r.location for r in report.records] == [
        "<root>:F.adaptive_avg_pool2d#0",
        "<root>:F.adaptive_max_pool2d#1",
        "<root>:F.adaptive_avg_pool2d#2",
    ]
    y = torch.randn(1, 3, 13, 11)
    torch.testing.assert_close(converted(y), model(y), rtol=1e-5, atol=1e-5)
    converted.train(), model.train()  # the forward's self.training branch still follows the mode
    torch.testing.assert_close(converted(y.abs()), model(y.abs()), rtol=1e-5, atol=1e-5)


def test_another_size_is_refused_and_dynamic_serves_every_size() -> None:
    model, _, converted = _converted()
    expected = r"<root>: F.adaptive_max_pool2d \(output size \(5, 7\)\) was converted for input spatial size"
    with pytest.raises(SpatialSizeError, match=expected):
        converted(torch.randn(1, 3, 12, 12))
    dynamic = fxpool.convert(model, torch.randn(1, 3, 13, 11), dynamic=True, strict=True)
    y = torch.randn(1, 3, 17, 9)
    torch.testing.assert_close(dynamic(y), model(y), rtol=1e-5, atol=1e-5)


def _no_pool_ops(text: str) -> bool:
    return "adaptive" not in text.lower().replace("exactadaptivepool", "")


def test_every_tracer_sees_the_replacement_not_the_native_pool(tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model, x, converted = _converted()
    expected = model(x).detach()
    traced = torch.jit.trace(converted, x)
    assert "aten::adaptive" not in str(traced.inlined_graph)
    torch.testing.assert_close(traced(x), expected, rtol=1e-5, atol=1e-5)
    for strict in (False, True):
        program = torch.export.export(converted, (x,), strict=strict)
        assert "adaptive" not in str(program.graph)
        torch.testing.assert_close(program.module()(x), expected, rtol=1e-5, atol=1e-5)
    for dynamo in (False, True):
        path = tmp_path / f"m{dynamo}.onnx"
        torch.onnx.export(converted, (x,), str(path), dynamo=dynamo)
        assert not {n.op_type for n in onnx.load(str(path)).graph.node} & {"GatherND", "MaxPool", "GlobalMaxPool"}
        session = ort.InferenceSession(str(path))
        out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
        torch.testing.assert_close(torch.from_numpy(out), expected, rtol=1e-5, atol=1e-5)


def test_converting_a_converted_model_is_a_reported_no_op() -> None:
    x = torch.randn(1, 2, 13, 11)
    once = fxpool.convert(nn.AdaptiveMaxPool2d((5, 7)), x)
    again = fxpool.convert(once, x, strict=True)
    (record,) = fxpool.report_of(again).records
    assert record.converted and record.replacement.startswith("already converted")
    assert "converted before" in fxpool.report_of(again).check.summary()
    _, y, functional = _converted()
    records = fxpool.report_of(fxpool.convert(functional, y, strict=True)).records
    assert len(records) == 3 and all(r.replacement.startswith("already converted") for r in records)


def test_export_of_a_converted_max_pool_is_strict_again(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    x = torch.randn(1, 2, 13, 11)
    once = fxpool.convert(nn.AdaptiveMaxPool2d((5, 7)), x)
    fxpool.export(once, x, str(tmp_path / "again.onnx"), strict=True)


def test_a_compiled_model_is_refused_with_the_fix() -> None:
    compiled = torch.compile(nn.Sequential(nn.AdaptiveAvgPool2d(3)))
    with pytest.raises(UnsupportedModelError, match=r"fxpool.convert\(model._orig_mod, example\)"):
        fxpool.convert(compiled, torch.randn(1, 2, 7, 7))


@dataclasses.dataclass
class Config:
    pool: nn.Module


class HeldByConfig(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config  # a plain object: its pool module is no part of the module tree

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.config.pool(x)


def test_a_pool_module_held_by_a_plain_object_is_converted_without_touching_that_object() -> None:
    config = Config(nn.AdaptiveAvgPool2d((5, 7)))
    model, x = HeldByConfig(config), torch.randn(1, 2, 13, 11)
    converted = fxpool.convert(model, x, strict=True)
    assert type(config.pool) is nn.AdaptiveAvgPool2d and converted.config is config
    assert fxpool.report_of(converted).stands_alone
    traced = torch.jit.trace(converted, x)
    assert "aten::adaptive" not in str(traced.inlined_graph)
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-6)


class AtTwoSizes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 1e9:  # data-dependent: nothing here is traced
            return x
        return self.pool(x).sum() + self.pool(x[..., :7, :7]).sum()


def test_a_pool_module_at_two_sizes_in_untraceable_code_is_converted_by_size() -> None:
    model, x = AtTwoSizes(), torch.randn(1, 2, 11, 10)
    converted = fxpool.convert(model, x, strict=True)
    assert isinstance(converted.pool, PoolCalls)
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(SpatialSizeError):
        converted(torch.randn(1, 2, 12, 12))


class GlobalOnly(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 1)


def test_left_global_averages_stand_alone() -> None:
    from fxpool.report import ConversionReport, PoolRecord

    record = PoolRecord(
        "a:F.adaptive_avg_pool2d#0",
        "functional",
        "F.adaptive_avg_pool2d",
        (1, 2, 5, 5),
        "1",
        (1, 2, 1, 1),
        False,
        "left to PyTorch",
        "undone",
        export_translated=True,
        family="avg",
        global_output=True,
    )
    report = ConversionReport((record,))
    assert record.global_average and report.stands_alone and "global averages" in report.summary()
    max_record = dataclasses.replace(record, export_translated=False, family="max")
    assert not ConversionReport((max_record,)).stands_alone
    assert not ConversionReport((dataclasses.replace(record, global_output=False),)).stands_alone  # (None, 1) is not global


class CallAndModule(nn.Module):
    """A functional max pool and a pool module of the same output size, at two sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, 5).sum() + self.pool(x[..., :11, :11]).sum()


def test_a_replacement_running_pytorchs_kernel_inside_an_intercepted_forward_is_not_intercepted() -> None:
    model, x = CallAndModule(), torch.randn(1, 2, 13, 13)
    converted = fxpool.convert(model, x, strict=True)  # the pool module's eager kernel call passes the mode
    torch.testing.assert_close(converted(x), model(x), rtol=0, atol=0)


def test_a_replacement_the_example_never_reaches_is_undone_loudly(monkeypatch) -> None:
    """Were a functional call ever taken for fxpool's own (as a path sharing torch's prefix once was), the
    native pool would run under a report that says replaced: the self-check sees no replacement run."""
    import fxpool.intercepting

    monkeypatch.setattr(fxpool.intercepting, "_called_by_fxpool", lambda: True)

    class Functional(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.adaptive_avg_pool2d(x, (5, 7))

    x = torch.randn(1, 2, 13, 11)
    report = fxpool.report_of(fxpool.convert(Functional(), x))
    (left,) = report.unconverted
    assert "never reached this replacement" in left.reason and not report.converted
    with pytest.raises(fxpool.UnconvertedPoolError):
        fxpool.convert(Functional(), x, strict=True)
