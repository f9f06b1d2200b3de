"""Dynamic spatial axes, by every route a user takes: never a silently wrong graph.

A model converted without ``dynamic=True`` is specialised to the example's size; exporting it with
dynamic spatial axes is an error naming ``dynamic=True`` by every route: ``torch.export`` strict and not
(``Dim.AUTO``, ``Dim.DYNAMIC``, named Dims), the dynamo ONNX exporter (which falls back from
``strict=False`` to ``strict=True``, where a size check compiled as a runtime assertion would be dropped
from the ONNX graph), and the TorchScript exporter's ``dynamic_axes``, with fxpool's hook or without it.
The hook keeps ``torch.onnx.export``'s signature (timm reads it). A ``dynamic=True`` conversion passes
every route exactly at sizes it never saw.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from torch import nn
from torch.export import Dim

import fxpool


def _static_conversion() -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(6)).eval()
    x = torch.randn(1, 3, 64, 64)
    return fxpool.convert(model, x), x


SPECS = {
    "auto": lambda: {2: Dim.AUTO, 3: Dim.AUTO},
    "dynamic": lambda: {2: Dim.DYNAMIC, 3: Dim.DYNAMIC},
    "named": lambda: {2: Dim("h", min=32, max=512), 3: Dim("w", min=32, max=512)},
}


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("spec", sorted(SPECS))
def test_torch_export_of_a_static_conversion_with_dynamic_spatial_axes_is_refused(spec: str, strict: bool) -> None:
    converted, x = _static_conversion()
    with pytest.raises(Exception, match=r"dynamic=True") as raised:
        torch.export.export(converted, (x,), dynamic_shapes=(SPECS[spec](),), strict=strict)
    if not strict:  # dynamo wraps what the traced code raises in its own error, the message kept
        assert isinstance(raised.value, fxpool.SpatialSizeError)


def test_torch_export_of_a_static_conversion_with_a_dynamic_batch_is_fine() -> None:
    converted, x = _static_conversion()
    x = torch.cat([x, x])  # torch.export specialises an example size of 1
    for strict in (False, True):
        program = torch.export.export(converted, (x,), dynamic_shapes=({0: Dim("batch", max=64)},), strict=strict)
        y = torch.randn(3, 3, 64, 64)
        torch.testing.assert_close(program.module()(y), converted(y), rtol=1e-5, atol=1e-6)


def test_the_dynamo_onnx_exporter_without_the_hook_is_refused_after_its_strict_fallback(tmp_path) -> None:
    pytest.importorskip("onnxscript")
    converted, x = _static_conversion()
    with warnings.catch_warnings(), pytest.raises(Exception, match=r"dynamic=True"):
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (x,), str(tmp_path / "m.onnx"), dynamo=True, dynamic_shapes=(SPECS["auto"](),), verbose=False)
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_the_hook_refuses_dynamic_spatial_axes_on_a_static_conversion(dynamo: bool, tmp_path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(6)).eval()
    x = torch.randn(1, 3, 64, 64)
    axes = {"dynamic_shapes": (SPECS["dynamic"](),)} if dynamo else {"dynamic_axes": {"x": {2: "h"}}, "input_names": ["x"]}
    with fxpool.onnx_export_hook(), pytest.raises(fxpool.SpatialSizeError, match=r"dynamic=True"):
        torch.onnx.export(model, (x,), str(tmp_path / "m.onnx"), dynamo=dynamo, **axes)


def test_the_hook_keeps_torch_onnx_exports_signature() -> None:
    original = torch.onnx.export
    with fxpool.onnx_export_hook(dynamic=True):
        assert torch.onnx.export is not original
        assert torch.onnx.export.__wrapped__ is original  # type: ignore[attr-defined]
        assert inspect.signature(torch.onnx.export) == inspect.signature(original)
        assert "dynamo" in inspect.signature(torch.onnx.export).parameters
        assert torch.onnx.export.__name__ == original.__name__ and torch.onnx.export.__doc__ == original.__doc__
    assert torch.onnx.export is original


def test_timms_onnx_export_with_dynamic_size_through_the_hook(tmp_path) -> None:
    """timm reads torch.onnx.export's signature for ``dynamo``; pvt_v2 with linear attention pools to 7x7."""
    timm = pytest.importorskip("timm")
    pytest.importorskip("onnxruntime")
    from timm.utils.onnx import onnx_export

    from fxpool.verifying import run_onnxruntime

    model = timm.create_model("pvt_v2_b0", pretrained=False, linear=True, num_classes=10).eval()
    x = torch.randn(1, 3, 160, 160)
    path = str(tmp_path / "pvt.onnx")
    with warnings.catch_warnings(), fxpool.onnx_export_hook(dynamic=True):
        warnings.simplefilter("ignore")
        onnx_export(model, path, example_input=x, dynamic_size=True, use_dynamo=False, check=True)
    with torch.no_grad():
        for size in [(128, 128), (192, 160), (224, 224)]:
            y = torch.randn(1, 3, *size)
            (out,) = run_onnxruntime(path, (y,))
            torch.testing.assert_close(torch.from_numpy(out), model(y), rtol=1e-4, atol=1e-5)


def test_convert_of_a_program_keeps_its_named_and_derived_dims() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.AdaptiveAvgPool2d(6), nn.AdaptiveMaxPool2d((3, 5))).eval()
    x = torch.randn(2, 3, 128, 96)
    shapes = ({0: Dim("batch", max=64), 2: 32 * Dim("h32", min=2, max=32), 3: Dim("w", min=24, max=999)},)
    program = torch.export.export(model, (x,), dynamic_shapes=shapes)
    converted = fxpool.convert(program)
    ranges = sorted((str(k).count("*"), int(v.lower), int(v.upper)) for k, v in converted.range_constraints.items())
    assert ranges == sorted((str(k).count("*"), int(v.lower), int(v.upper)) for k, v in program.range_constraints.items())
    for shape in [(1, 3, 64, 24), (5, 3, 320, 999), (2, 3, 96, 37)]:
        y = torch.randn(shape)
        torch.testing.assert_close(converted.module()(y), model(y), rtol=1e-5, atol=1e-6)


def test_openvino_converts_a_dynamic_program_exact_at_other_sizes() -> None:
    ov = pytest.importorskip("openvino")
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((6, 5)), nn.AdaptiveMaxPool2d(3)).eval()
    x = torch.randn(1, 3, 64, 48)
    program = torch.export.export(
        fxpool.convert(model, x, dynamic=True), (x,), dynamic_shapes=({2: Dim("h", min=8, max=512), 3: Dim("w", min=8, max=512)},)
    )
    compiled = ov.Core().compile_model(ov.convert_model(program), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for size in [(8, 9), (100, 37), (61, 64)]:
        y = torch.randn(1, 3, *size)
        torch.testing.assert_close(torch.from_numpy(compiled([y.numpy()])[0]), model(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["avg", "max"])
@pytest.mark.parametrize("spatial", [(1,), (1, 1), (1, 9), (1, 1, 1)], ids=str)
def test_a_dynamic_conversion_from_an_example_of_size_one_exports_exact_at_other_sizes(family: str, spatial, tmp_path) -> None:
    """The dynamo ONNX exporter traces with size-oblivious sizes, so an example of size 1 gives a symbolic size
    whose hint is 1. ``.contiguous()`` of the spatial-first copy asked whether it was already contiguous, which
    it is at size 1: a guard the ONNX graph drops, and the average graph was off by 1.6-2.9 at every other size."""
    onnxruntime = pytest.importorskip("onnxruntime")
    dims = len(spatial)
    pools = {"avg": (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)}
    pools["max"] = (nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
    model = pools[family][dims - 1]((5, 3, 4)[:dims])
    path = str(tmp_path / "pool.onnx")
    shapes = ({2 + axis: Dim.DYNAMIC for axis in range(dims)},)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fxpool.export(model, torch.randn(2, 3, *spatial), path, dynamo=True, dynamic=True, dynamic_shapes=shapes)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for size in [(2, 7, 3), (13, 4, 6), (1, 1, 1)]:
        x = torch.randn(2, 3, *size[:dims])
        got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize(
    ("pool", "size"),
    [(nn.AdaptiveMaxPool2d(7), 10), (nn.AdaptiveMaxPool1d(101), 1000), (nn.AdaptiveMaxPool2d(6), 64)],
    ids=["10->7", "1d", "slices 64->6"],
)
def test_the_dynamo_exporters_strict_capture_keeps_nan_in_max_windows(pool: nn.Module, size: int, dynamic: bool, tmp_path) -> None:
    """The dynamo ONNX exporter falls back to ``torch.export(strict=True)`` where ``strict=False`` fails. Dynamo
    answers False for ``torch.onnx.is_in_onnx_export()``, so the graph lost the NaN flag of its maxima, and
    onnxruntime's ReduceMax skips NaN: 23-43% of the outputs differed from PyTorch's. fxpool reads the exporter's flag."""
    onnxruntime = pytest.importorskip("onnxruntime")
    from torch.onnx._internal.exporter import _capture_strategies

    spatial = (size,) * (2 if isinstance(pool, nn.AdaptiveMaxPool2d) else 1)
    x = torch.randn(2, 3, *spatial)
    converted = fxpool.convert(pool, x, dynamic=dynamic)
    shapes = ({2 + axis: Dim.DYNAMIC for axis in range(len(spatial))},) if dynamic else None
    path = str(tmp_path / "max.onnx")
    strict_only = (_capture_strategies.TorchExportStrictStrategy,)
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.setattr(_capture_strategies, "CAPTURE_STRATEGIES", strict_only)
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (x,), path, dynamo=True, dynamic_shapes=shapes)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    for scale in (1.0, 1.3) if dynamic else (1.0,):
        y = torch.randn(2, 3, *(int(s * scale) for s in spatial), generator=generator)
        y[torch.rand(y.shape, generator=generator) < 0.05] = float("nan")
        got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: y.numpy()})[0])
        torch.testing.assert_close(got, pool(y), rtol=0.0, atol=0.0, equal_nan=True)
