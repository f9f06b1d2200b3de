"""Hugging Face's ONNX exporter with dynamic axes through fxpool's hook (model_zoo_checks/optimum_export.py).

optimum-onnx 0.1.0 needs transformers < 4.58, older than the test venv's, so these tests run in a venv of
their own (``make optimum``) and are skipped elsewhere with the line that installs it. Models from small
configs, random weights, nothing downloaded. Tolerance: elementwise, atol 1e-5 times the output's largest
magnitude (at least 1) plus rtol 1e-4.
"""

from __future__ import annotations

import warnings

import pytest

import fxpool
from model_zoo_checks import optimum_export

WHY_NOT = optimum_export.missing()
needs_optimum = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@needs_optimum
@pytest.mark.parametrize("model", list(optimum_export.MODELS))
def test_optimums_export_through_the_hook_is_exact_at_sizes_it_was_not_exported_at(model: str, tmp_path) -> None:
    row = optimum_export.check(model, tmp_path)
    assert row.reason is None, row.reason
    assert row.pools == 4  # the pyramid's 1, 2, 3 and 6
    assert row.dynamic_axes == {"pixel_values": ["batch_size", "num_channels", "height", "width"]}
    assert not row.forbidden_ops, row.forbidden_ops  # fxpool's form: no GatherND, Loop, If or fallback
    assert row.ops.get("Range", 0) >= 3, row.ops  # the dynamic windows, from the runtime size
    for check in row.checks:
        assert check.agrees, check
    unseen = [c for c in row.checks if c.exact and c.size != row.exported_at]
    if model.startswith("upernet"):  # any multiple of 32: three sizes the export never saw
        assert len({c.size[1:] for c in unseen} - {row.exported_at[1:]}) == 3, row.checks
    else:  # PyTorch runs BEiT only at its config's patch count; elsewhere both refuse, never a silent answer
        assert {c.size for c in row.checks if c.torch_refused} == set(optimum_export.REFUSED), row.checks
        assert len(unseen) == len(optimum_export.FIXED_GRID), row.checks


@needs_optimum
def test_main_export_of_a_saved_model_through_the_hook(tmp_path, monkeypatch) -> None:
    """optimum's ``main_export`` (what ``optimum-cli export onnx`` calls) from a local folder, offline."""
    import onnxruntime
    from optimum.exporters.onnx import main_export

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = optimum_export.MODELS["upernet-convnext"][0]().eval()
    model.save_pretrained(tmp_path / "saved")
    optimum_export.register_segmentation_task(model.config.model_type)
    with warnings.catch_warnings(), fxpool.onnx_export_hook(dynamic=True):
        warnings.simplefilter("ignore")
        main_export(str(tmp_path / "saved"), tmp_path / "onnx", task="semantic-segmentation", height=256, width=256)
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    for size in optimum_export.ANY_SIZE:
        check = optimum_export.check_size(session, model, size)
        assert check.exact, check


@needs_optimum
def test_the_hook_without_dynamic_true_refuses_optimums_dynamic_axes(tmp_path) -> None:
    from optimum.exporters.onnx import onnx_export_from_model

    model = optimum_export.MODELS["upernet-convnext"][0]().eval()
    optimum_export.register_segmentation_task(model.config.model_type)
    with warnings.catch_warnings(), fxpool.onnx_export_hook(), pytest.raises(fxpool.SpatialSizeError, match=r"dynamic=True"):
        warnings.simplefilter("ignore")
        onnx_export_from_model(model, tmp_path, task="semantic-segmentation", height=256, width=256)


@needs_optimum
def test_without_the_hook_the_stock_exporter_refuses_the_pyramid(tmp_path) -> None:
    from optimum.exporters.onnx import onnx_export_from_model

    model = optimum_export.MODELS["upernet-convnext"][0]().eval()
    optimum_export.register_segmentation_task(model.config.model_type)
    with warnings.catch_warnings(), pytest.raises(Exception, match=r"adaptive_avg_pool2d"):
        warnings.simplefilter("ignore")
        onnx_export_from_model(model, tmp_path, task="semantic-segmentation", height=256, width=256)


def test_a_size_pytorch_refuses_passes_only_when_the_graph_refuses_it_too() -> None:
    both = optimum_export.SizeCheck((1, 320, 320), torch_refused="RuntimeError: a", onnx_refused="Fail: b")
    silent = optimum_export.SizeCheck((1, 320, 320), torch_refused="RuntimeError: a")
    close = optimum_export.SizeCheck((1, 256, 256), max_error=1e-8, scale=0.1, within=True)
    off = optimum_export.SizeCheck((1, 256, 256), max_error=1.0, scale=0.1, within=False)
    assert both.agrees and both.exact is None
    assert not silent.agrees and not off.agrees and close.agrees
    table = optimum_export.markdown([optimum_export.OptimumRow("m", (1, 256, 256), 4, {"GatherND": 1}, {}, (both, off))])
    assert "forbidden: GatherND" in table and "1x320x320: both refuse" in table and "(OFF)" in table
