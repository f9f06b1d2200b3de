"""Example inputs are read as torch.onnx.export reads them: dicts, keyword arguments and kwargs=."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.onnx._internal.exporter._compat import _get_torch_export_args

import fxpool
from fxpool import ExampleInputError, report_of
from fxpool.example import read_example
from fxpool.verifying import run_onnxruntime

EXPORTERS = [pytest.param(False, id="torchscript"), pytest.param(True, id="dynamo")]
# The TorchScript exporter passes every parameter positionally, which TakesKeywords' keyword-only gain
# refuses: the original fails the same way, so its models go through the dynamo exporter only.
KEYWORD_EXPORTERS = [pytest.param(True, id="dynamo")]


class TakesDict(nn.Module):
    """A model whose one positional argument is a dict (detection and multi-modal code)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(7)  # 10 -> 7: the stock TorchScript exporter refuses it

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.pool(self.conv(batch["image"])) * batch["scale"]


class TakesKeywords(nn.Module):
    """An image plus an optional mask of another channel count, and a keyword-only gain.

    Its forward pools functionally: the call is intercepted at run time, so nothing is traced and
    both branches of ``mask`` stay as they are written.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, image: torch.Tensor, mask: torch.Tensor | None = None, *, gain: float = 1.0) -> torch.Tensor:
        y = F.adaptive_avg_pool2d(self.conv(image), 7)
        if mask is not None:
            y = y * self.pool(mask)
        return y * gain


class PoolsByModule(nn.Module):
    """The same computation with pool modules only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, image: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.pool(self.conv(image))
        return y if mask is None else y * self.pool(mask)


def image() -> torch.Tensor:
    return torch.randn(1, 3, 10, 10)


def mask() -> torch.Tensor:
    return torch.rand(1, 4, 10, 10)


def batch() -> dict[str, torch.Tensor]:
    return {"image": image(), "scale": torch.tensor(2.0)}


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((image(),), None),
        ((image(), {"mask": mask()}), None),
        (({"image": image()},), None),
        ((batch(), {}), None),
        ((image(), {"not": "keywords"}), {"mask": mask()}),
        ((image(), mask()), {}),
    ],
    ids=["tensor", "trailing-dict", "only-dict", "dict-then-empty", "dict-and-kwargs", "empty-kwargs"],
)
def test_the_example_is_read_exactly_as_the_dynamo_exporter_reads_it(args: tuple, kwargs: dict | None) -> None:
    ours = read_example(args, kwargs)
    theirs_args, theirs_kwargs = _get_torch_export_args(args, kwargs)
    assert ours.args == tuple(theirs_args)
    assert dict(ours.kwargs) == dict(theirs_kwargs or {})


def test_a_lone_tensor_and_a_lone_dict_are_one_argument_and_keyword_arguments() -> None:
    x = image()
    assert read_example(x).args == (x,) and not read_example(x).kwargs
    assert read_example({"image": x}).args == () and dict(read_example({"image": x}).kwargs) == {"image": x}


def test_a_model_taking_a_dict_converts_and_exports_with_torch_onnx_spelling(tmp_path) -> None:
    model, example = TakesDict().eval(), batch()
    converted = fxpool.convert(model, (example, {}))
    assert [r.replacement for r in report_of(converted).converted] == ["sliding H 10->7 (k=2,3) -> sliding W 10->7 (k=2,3)"]
    torch.testing.assert_close(converted(example), model(example), rtol=1e-5, atol=1e-6)
    for dynamo in (False, True):
        result = fxpool.export(model, (example, {}), tmp_path / f"dict-{dynamo}.onnx", dynamo=dynamo)
        assert result.max_abs_error is not None and result.max_abs_error < 1e-5


def test_a_dict_read_as_keywords_by_mistake_says_how_to_pass_it_positionally() -> None:
    with pytest.raises(ExampleInputError, match=r"read as keyword arguments.*\(batch, \{\}\)"):
        fxpool.convert(TakesDict(), batch())


@pytest.mark.parametrize("spelling", ["trailing-dict", "example_kwargs", "only-keywords"])
def test_keyword_arguments_reach_the_recording_the_trace_and_the_self_check(spelling: str) -> None:
    model, x, m = TakesKeywords().eval(), image(), mask()
    keywords = {"mask": m, "gain": 3.0}
    if spelling == "trailing-dict":
        converted = fxpool.convert(model, (x, keywords))
    elif spelling == "example_kwargs":
        converted = fxpool.convert(model, x, example_kwargs=keywords)
    else:
        converted = fxpool.convert(model, ({"image": x, **keywords},))
    report = report_of(converted)
    assert report.check.status == "passed", report.check.summary()
    assert len(report.converted) == 2 and not report.unconverted, report
    torch.testing.assert_close(converted(x, mask=m, gain=3.0), model(x, mask=m, gain=3.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dynamo", KEYWORD_EXPORTERS)
def test_export_takes_kwargs_in_any_order_and_feeds_onnxruntime_by_parameter(dynamo: bool, tmp_path) -> None:
    # mask and image differ in channels, so feeding them to the wrong graph input cannot pass
    model, x, m = TakesKeywords().eval(), image(), mask()
    result = fxpool.export(model, (), tmp_path / "kw.onnx", kwargs={"mask": m, "image": x}, dynamo=dynamo)
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5
    assert len(result.report.converted) == 2
    result = fxpool.export(model, (x, {"mask": m}), tmp_path / "trailing.onnx", dynamo=dynamo)
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5


@pytest.mark.parametrize("dynamo", KEYWORD_EXPORTERS)
def test_the_hook_reads_kwargs_as_torch_onnx_export_does(dynamo: bool, tmp_path) -> None:
    model, x, m = TakesKeywords().eval(), image(), mask()
    path = str(tmp_path / "hooked.onnx")
    with fxpool.onnx_export_hook(strict=True):
        torch.onnx.export(model, (), path, kwargs={"image": x, "mask": m}, dynamo=dynamo)
    (out,) = run_onnxruntime(path, ({"image": x, "mask": m},), forward=model.forward)
    with torch.no_grad():
        expected = model(x, mask=m)
    torch.testing.assert_close(torch.from_numpy(out), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("example", ["left-out", "None", "given"])
def test_nothing_is_traced_so_every_spelling_of_an_optional_argument_stays_exact(example: str) -> None:
    # a trace would keep only the branch of mask the example took; interception keeps the forward as written
    model, x, m = TakesKeywords().eval(), image(), mask()
    converted = fxpool.convert(model, {"left-out": x, "None": (x, {"mask": None}), "given": (x, {"mask": m})}[example])
    for again in (converted, copy.deepcopy(converted), fxpool.convert(converted, x)):
        torch.testing.assert_close(again(x), model(x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(again(x, None), model(x, None), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(again(x, m), model(x, m), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(again(x, mask=m), model(x, mask=m), rtol=1e-5, atol=1e-6)


def test_a_model_pooling_by_modules_only_keeps_every_spelling_exact() -> None:
    model, x, m = PoolsByModule().eval(), image(), mask()
    converted = fxpool.convert(model, x)
    assert report_of(converted).intercepted == () and len(report_of(converted).converted) == 1
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(converted(x, m), model(x, m), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dynamo", KEYWORD_EXPORTERS)
def test_a_left_out_optional_argument_exports_without_it(dynamo: bool, tmp_path) -> None:
    model, x = TakesKeywords().eval(), image()
    result = fxpool.export(model, x, tmp_path / "no-mask.onnx", dynamo=dynamo)
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5


class IgnoresItsFirstInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, unused: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class ScalesByAFloat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return self.pool(x) * scale


@pytest.mark.parametrize("dynamo", EXPORTERS)
@pytest.mark.parametrize(
    "model,args",
    [(IgnoresItsFirstInput, lambda: (torch.randn(2), image())), (ScalesByAFloat, lambda: (image(), 2.5))],
    ids=["unused-input", "float-arg"],
)
def test_verification_feeds_the_graph_the_right_tensors(model, args, dynamo: bool, tmp_path) -> None:
    # the TorchScript exporter drops the unused input (the graph has one input, "x.1")
    result = fxpool.export(model().eval(), args(), tmp_path / "m.onnx", dynamo=dynamo)
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5
