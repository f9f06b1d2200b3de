"""ONNX round trips: export -> onnx.checker -> onnxruntime -> assert_close against PyTorch."""

from __future__ import annotations

import subprocess
import sys
import warnings

import onnx
import pytest
import torch
import torch.nn.functional as F
import torchvision
from graphs import DATA_DEPENDENT, data_dependent_ops
from models import IndicesHead
from torch import nn

import fxpool
from fxpool.verifying import op_histogram, run_onnxruntime

FORBIDDEN = DATA_DEPENDENT
CASES = {  # name: (input spatial, output, the op that must carry the pool)
    "6->3": ((6, 6), (3, 3), "AveragePool"),
    "7->3": ((7, 7), (3, 3), "AveragePool"),
    "4x5->16x20": ((4, 5), (16, 20), "Resize"),
    "10->7": ((10, 10), (7, 7), "Gather"),  # window sums: a zero, constant Gathers, Einsum/ReduceSum, Div
    "13x17->5x7": ((13, 17), (5, 7), "Gather"),  # window sums
    "4x5->6": ((4, 5), (6, 6), "Gather"),  # window sums (lengths 1 and 2)
    "64x48->6x40": ((64, 48), (6, 40), "AveragePool"),  # slices, sliding windows (stride-1 pools, a Gather)
    "9->1": ((9, 9), (1, 1), "ReduceMean"),
}
EXPORTERS = [
    pytest.param(False, 11, id="torchscript-11"),
    pytest.param(False, 13, id="torchscript-13"),
    pytest.param(False, 17, id="torchscript-17"),
    pytest.param(False, 20, id="torchscript-20"),
    pytest.param(True, 18, id="dynamo-18"),
    pytest.param(True, 23, id="dynamo-23"),
]


def pooled(output: tuple, family: str = "avg") -> nn.Module:
    pool = nn.AdaptiveAvgPool2d(output) if family == "avg" else nn.AdaptiveMaxPool2d(output)
    return nn.Sequential(nn.Conv2d(3, 4, 1), pool).eval()


@pytest.mark.parametrize("dynamo,opset", EXPORTERS)
@pytest.mark.parametrize("case", list(CASES))
def test_each_replacement_kind_exports_portable_ops(case: str, dynamo: bool, opset: int, tmp_path) -> None:
    in_sizes, out_sizes, op = CASES[case]
    model = pooled(out_sizes)
    x = torch.randn(2, 3, *in_sizes)
    result = fxpool.export(model, x, tmp_path / "m.onnx", dynamo=dynamo, opset_version=opset)
    assert op in result.op_histogram
    assert not data_dependent_ops(result.path), result.op_histogram
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", ["10->7", "13x17->5x7", "4x5->6", "7->3", "4x5->16x20", "9->1"])
def test_max_family_exports_with_constant_gathers_at_most(case: str, dynamo: bool, tmp_path) -> None:
    in_sizes, out_sizes, _ = CASES[case]
    model = nn.Sequential(nn.AdaptiveMaxPool2d(out_sizes))  # no conv: nothing but the pool may round
    x = torch.randn(2, 3, *in_sizes)
    result = fxpool.export(model, x, tmp_path / "m.onnx", dynamo=dynamo)
    histogram = result.op_histogram
    assert not data_dependent_ops(result.path), histogram
    assert result.max_abs_error == 0.0  # max has no rounding


def test_stock_exporter_fails_where_fxpool_succeeds(tmp_path) -> None:
    model = torchvision.models.alexnet(weights=None).eval()
    for size in (160, 320):
        x = torch.randn(1, 3, size, size)
        with pytest.raises(Exception, match="adaptive_avg_pool2d"):
            torch.onnx.export(model, (x,), str(tmp_path / "stock.onnx"), dynamo=False)
        result = fxpool.export(model, x, tmp_path / f"alexnet{size}.onnx", dynamo=False)
        assert result.max_abs_error < 1e-4 and "MatMul" not in result.op_histogram  # no averaging matrix


def test_vgg_at_320_round_trip(tmp_path) -> None:
    model = torchvision.models.vgg11(weights=None).eval()
    x = torch.randn(1, 3, 320, 320)
    with pytest.raises(Exception, match="adaptive_avg_pool2d"):
        torch.onnx.export(model, (x,), str(tmp_path / "stock.onnx"), dynamo=False)
    result = fxpool.export(model, x, tmp_path / "vgg.onnx", dynamo=False)
    assert result.max_abs_error < 1e-4


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_dynamic_batch_runs_at_another_batch_size(dynamo: bool, tmp_path) -> None:
    model = pooled((7, 7))
    path = tmp_path / "m.onnx"
    options = (
        {"dynamic_shapes": ({0: torch.export.Dim("batch", min=1, max=64)},)}
        if dynamo
        else {"dynamic_axes": {"x": {0: "batch"}}, "input_names": ["x"]}
    )
    fxpool.export(model, torch.randn(2, 3, 10, 10), path, dynamo=dynamo, **options)
    x = torch.randn(5, 3, 10, 10)
    (out,) = run_onnxruntime(str(path), (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


def test_shape_specialised_graph_rejects_other_sizes_and_dynamic_spatial_axes(tmp_path) -> None:
    model = pooled((7, 7))
    path = tmp_path / "m.onnx"
    fxpool.export(model, torch.randn(1, 3, 10, 10), path, dynamo=False)
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        run_onnxruntime(str(path), (torch.randn(1, 3, 12, 12),))
    with pytest.raises(ValueError, match="spatial axis 2.*dynamic=True"):
        fxpool.export(model, torch.randn(1, 3, 10, 10), path, dynamo=False, dynamic_axes={"x": {0: "b", 2: "h"}}, input_names=["x"])


def dynamic_hw(dynamo: bool, smallest: int) -> dict:
    """Export options that make axes 2 and 3 of the input ``x`` dynamic, for either exporter."""
    if dynamo:
        return {
            "dynamic_shapes": ({2: torch.export.Dim("h", min=smallest, max=512), 3: torch.export.Dim("w", min=smallest, max=512)},)
        }
    return {"dynamic_axes": {"x": {2: "h", 3: "w"}}, "input_names": ["x"]}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_dynamic_size_mode_is_exact_at_every_size(dynamo: bool, tmp_path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d((7, 5))).eval()
    path = tmp_path / "dyn.onnx"
    result = fxpool.export(model, torch.randn(1, 3, 10, 10), path, dynamo=dynamo, dynamic=True, **dynamic_hw(dynamo, smallest=2))
    assert not {"GatherND", "Loop", "ScatterND"} & set(result.op_histogram)  # Where: the window mask
    # the dynamo graph pools natively or reshapes where the windows tile, behind Ifs (tests/test_tiling.py)
    assert ("If" in result.op_histogram) is dynamo and ("AveragePool" in result.op_histogram) is dynamo
    for h, w in [(4, 3), (10, 10), (13, 17), (31, 64), (7, 5), (100, 9), (14, 10), (56, 40)]:
        x = torch.randn(1, 3, h, w)
        (out,) = run_onnxruntime(str(path), (x,))
        torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


DYNAMIC_MAX_SIZES = [(4, 3), (10, 10), (13, 17), (31, 64), (7, 5), (100, 9), (1, 1), (21, 15)]


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_dynamic_size_mode_covers_max_pools_exactly_at_every_size(dynamo: bool, tmp_path) -> None:
    model = nn.Sequential(nn.AdaptiveMaxPool2d((7, 5))).eval()  # alone, so the comparison can be bit for bit
    path = tmp_path / "dynmax.onnx"
    result = fxpool.export(model, torch.randn(1, 3, 10, 10), path, dynamo=dynamo, dynamic=True, **dynamic_hw(dynamo, smallest=1))
    assert result.report.records[0].replacement.startswith("dynamic window maxima")
    # each window's positions from Range on the runtime size, Gathers, Max, a ReduceMax, its NaN flag (LeakyRelu,
    # ReduceSum, Sub) and its -inf alone (ReduceMin, Where); the dynamo graph a MaxPool where the windows tile and the
    # input is finite (ReduceL1), behind Ifs
    assert not {"GatherND", "Loop", "ScatterND"} & set(result.op_histogram), result.op_histogram
    expected = {"Gather", "ReduceMax", "LeakyRelu", "ReduceMin", "Where", "Max", "Range"}
    assert expected <= set(result.op_histogram), result.op_histogram
    assert ({"If", "MaxPool", "ReduceL1"} <= set(result.op_histogram)) is dynamo, result.op_histogram
    for h, w in DYNAMIC_MAX_SIZES:
        x = torch.randn(1, 3, h, w)
        for entry in (0.5, float("inf")):
            x[0, 0, 0, 0] = entry
            (out,) = run_onnxruntime(str(path), (x,))
            torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=0, atol=0)


class ExportTimePool(nn.Module):
    """Pools one way in eager and another under export, as some models do for their exporters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            return F.interpolate(x, size=(7, 7), mode="area")
        return F.adaptive_avg_pool2d(x, 7)


@pytest.mark.parametrize("dynamo", [False, True])
def test_exporter_level_translation_handles_export_only_pools(dynamo: bool, tmp_path) -> None:
    model = ExportTimePool()
    x = torch.randn(1, 3, 10, 10)
    if not dynamo:
        with pytest.raises(Exception, match="adaptive_avg_pool2d"):
            torch.onnx.export(model, (x,), str(tmp_path / "stock.onnx"), dynamo=False)
    else:
        torch.onnx.export(model, (x,), str(tmp_path / "stock.onnx"), dynamo=True)
        assert {"GatherND", "Where"} & set(op_histogram(str(tmp_path / "stock.onnx")))  # the stock decomposition
    result = fxpool.export(model, x, tmp_path / "m.onnx", dynamo=dynamo)
    assert "MatMul" not in result.op_histogram and not data_dependent_ops(result.path), result.op_histogram
    assert result.max_abs_error < 1e-5


class ExportTimeOnly(nn.Module):
    """A pool that exists only under export, of any rank, as smp's PSPNet switches to one."""

    def __init__(self, pool) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) if torch.onnx.is_in_onnx_export() else self.pool(x.clone())


EXPORT_TIME_POOLS = {  # name: (pool, example shape, the dynamic axes, sizes to run at)
    "area-7x5": (
        lambda x: F.interpolate(x, size=(7, 5), mode="area"),
        (1, 3, 10, 10),
        (2, 3),
        [(4, 3), (10, 10), (13, 17), (31, 64), (3, 100), (14, 10)],
    ),
    "none-x4": (lambda x: F.adaptive_avg_pool2d(x, (None, 4)), (1, 3, 10, 10), (2, 3), [(5, 9), (12, 3), (7, 8)]),
    "1d-5": (lambda x: F.interpolate(x, size=5, mode="area"), (2, 3, 12), (2,), [(7,), (5,), (3,), (64,)]),
    "3d-2x3x4": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), (1, 2, 6, 7, 8), (2, 3, 4), [(5, 5, 5), (9, 4, 13), (4, 6, 8)]),
    "area-scale-0.4": (
        lambda x: F.interpolate(x, scale_factor=0.4, mode="area"),
        (1, 3, 10, 10),
        (2, 3),
        [(10, 10), (13, 7), (31, 64)],
    ),  # the output size is computed in the graph
}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", list(EXPORT_TIME_POOLS))
def test_export_time_pools_export_with_dynamic_spatial_axes_exactly(case: str, dynamo: bool, tmp_path) -> None:
    pool, shape, axes, sizes = EXPORT_TIME_POOLS[case]
    model = ExportTimeOnly(pool).eval()
    path = tmp_path / "dyn.onnx"
    if dynamo:
        options = {"dynamic_shapes": ({a: torch.export.Dim(f"d{a}", min=2, max=512) for a in axes},)}
    else:
        options = {"dynamic_axes": {"x": {a: f"d{a}" for a in axes}}, "input_names": ["x"]}
    result = fxpool.export(model, torch.randn(*shape), path, dynamo=dynamo, dynamic=True, **options)
    assert "Range" in result.op_histogram  # the windows are built from the runtime size
    allowed = {"Where", "If"} if dynamo else {"Where"}  # a window mask; the dynamo graph's If for windows that tile
    assert not (FORBIDDEN - allowed) & set(result.op_histogram), result.op_histogram
    for spatial in sizes:
        x = torch.randn(*shape[:2], *spatial)
        x.view(-1)[::7], x.view(-1)[3::11], x.view(-1)[5::13] = float("nan"), float("inf"), float("-inf")
        (out,) = run_onnxruntime(str(path), (x,))
        torch.testing.assert_close(torch.from_numpy(out), pool(x), rtol=1e-5, atol=1e-6, equal_nan=True)


# --- the caller's state, sizes at export time, and the hook across threads ---


def test_export_of_a_train_mode_model_exports_eval_and_leaves_everything_as_it_was(tmp_path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.5), nn.AdaptiveAvgPool2d(5)).train()
    x = torch.randn(2, 3, 12, 12)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    for dynamo in (False, True):
        result = fxpool.export(model, x, tmp_path / f"train-{dynamo}.onnx", dynamo=dynamo)
        assert result.max_abs_error is not None and result.max_abs_error < 1e-5
    assert torch.equal(torch.get_rng_state(), rng)
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # num_batches_tracked too
    with pytest.raises(ValueError, match="verify=False"):
        fxpool.export(model, x, tmp_path / "t.onnx", dynamo=False, training=torch.onnx.TrainingMode.TRAINING)


def test_a_converted_model_exported_at_another_size_is_refused(tmp_path) -> None:
    for pool, size in ((nn.AdaptiveMaxPool2d(3), 11), (nn.AdaptiveAvgPool2d(10), 6)):
        converted = fxpool.convert(
            nn.Sequential(nn.Conv2d(3, 3, 1), pool), torch.randn(1, 3, 7 if size == 11 else 5, 7 if size == 11 else 5)
        )
        with pytest.raises(Exception, match="specialised for spatial size"):
            torch.onnx.export(converted, (torch.randn(1, 3, size, size),), str(tmp_path / "s.onnx"), dynamo=False)
        with pytest.raises(Exception, match="specialised for spatial size"):
            with fxpool.onnx_export_hook():
                torch.onnx.export(converted, (torch.randn(1, 3, size, size),), str(tmp_path / "h.onnx"), dynamo=False)


def test_the_hook_refuses_dynamic_spatial_axes_on_a_specialised_graph(tmp_path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(2))
    x = torch.randn(1, 3, 64, 64)
    options = {"dynamic_axes": {"x": {2: "h", 3: "w"}}, "input_names": ["x"], "dynamo": False}
    for subject in (model, fxpool.convert(model, x)):
        with pytest.raises(ValueError, match="spatial axis 2.*specialised"):
            with fxpool.onnx_export_hook():
                torch.onnx.export(subject, (x,), str(tmp_path / "d.onnx"), **options)
    with pytest.raises(ValueError, match="spatial axis -1"):
        fxpool.export(model, x, tmp_path / "n.onnx", dynamic_axes={"x": {-1: "w"}}, input_names=["x"], dynamo=False)
    # A pool that is a mean at every size is not specialised: dynamic spatial axes are fine there.
    resnet_like = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(1))
    fxpool.export(resnet_like, x, tmp_path / "mean.onnx", **options)
    y = torch.randn(1, 3, 40, 24)
    (out,) = run_onnxruntime(str(tmp_path / "mean.onnx"), (y,))
    torch.testing.assert_close(torch.from_numpy(out), resnet_like(y), rtol=1e-5, atol=1e-5)


def test_convert_from_several_threads_leaves_no_global_changed() -> None:
    from concurrent.futures import ThreadPoolExecutor

    call, getattr_ = nn.Module.__call__, nn.Module.__getattr__
    model = torchvision.models.alexnet(weights=None).eval()
    x = torch.randn(1, 3, 100, 100)
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda _: fxpool.report_of(fxpool.convert(model, x)), range(4)))
    assert all(r.check is not None and r.check.status == "passed" and len(r.converted) == 1 for r in reports)
    assert nn.Module.__call__ is call and nn.Module.__getattr__ is getattr_
    assert not hasattr(torch.onnx.is_in_onnx_export, "fxpool_original")  # fxpool's stand-in keeps the original
    torch.testing.assert_close(fxpool.convert(model, x)(x), model(x), rtol=1e-5, atol=1e-5)


class ScriptedAvg(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 7)


class ScriptedMax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, 7)


class UntraceablePools(nn.Module):
    """A pool inside a TorchScript submodule: fxpool leaves it (reported); the export-time translations
    still lower an average one exactly."""

    def __init__(self, family: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script's deprecation
            self.pool = torch.jit.script(ScriptedAvg() if family == "avg" else ScriptedMax())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x))


def test_the_report_says_which_left_pools_the_export_still_lowers_exactly_and_strict_tells_them_apart(tmp_path) -> None:
    x = torch.randn(1, 3, 10, 10)
    report = fxpool.explain(UntraceablePools("avg"), x)
    (left,) = report.unconverted
    assert left.export_translated and left.exports_exactly and not report.unexportable
    assert "1 of them exported exactly by fxpool's translations" in report.summary()
    assert "(export: fxpool translation)" in report.table()
    with pytest.raises(fxpool.UnconvertedPoolError, match="lower exactly at export time"):
        fxpool.convert(UntraceablePools("avg"), x, strict=True)
    # (the exporters themselves refuse a scripted submodule defined here: the lowering of left average
    # pools is tested on native pools in tests/test_symbolics.py)

    report = fxpool.explain(UntraceablePools("max"), x)
    assert not report.unconverted[0].export_translated and len(report.unexportable) == 1
    with pytest.raises(fxpool.UnconvertedPoolError, match="export would leave to the stock exporter"):
        fxpool.export(UntraceablePools("max"), x, tmp_path / "max.onnx", strict=True)
    with pytest.raises(fxpool.UnconvertedPoolError, match="export would leave to the stock exporter"):
        with fxpool.onnx_export_hook(strict=True):
            torch.onnx.export(UntraceablePools("max"), (x,), str(tmp_path / "max-hooked.onnx"), dynamo=False)


@pytest.mark.parametrize(
    "pool,size",
    [(nn.AdaptiveAvgPool2d(5), 10), (nn.AdaptiveAvgPool2d(7), 10), (nn.AdaptiveAvgPool2d(20), 10), (nn.AdaptiveMaxPool2d(7), 10)],
    ids=["avgpool", "sliding", "upsample", "max-gather"],
)
def test_torch_export_with_dynamic_spatial_axes_on_a_specialised_model_raises_fxpools_error(pool, size) -> None:
    converted = fxpool.convert(nn.Sequential(nn.Conv2d(3, 4, 1), pool).eval(), torch.randn(1, 3, size, size))
    dims = ({2: torch.export.Dim("h", min=2, max=256), 3: torch.export.Dim("w", min=2, max=256)},)
    with pytest.raises(fxpool.SpatialSizeError, match=r"specialised for spatial size \(10, 10\).*dynamic=True"):
        torch.export.export(converted, (torch.randn(1, 3, size, size),), dynamic_shapes=dims)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_an_export_that_fails_on_a_pool_fxpool_left_says_so_with_the_report(dynamo: bool, tmp_path) -> None:
    options = (
        {"dynamic_shapes": ({2: torch.export.Dim.AUTO, 3: torch.export.Dim.AUTO},)}
        if dynamo
        else {"dynamic_axes": {"x": {2: "h", 3: "w"}}, "input_names": ["x"]}
    )
    with pytest.raises(
        fxpool.ExportFailedError,
        match=r"(?s)left 1 adaptive pool\(s\) to the stock exporter.*"
        r"pool .*left to PyTorch \(!\).*return_indices=True",
    ):
        fxpool.export(IndicesHead().eval(), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=dynamo, dynamic=True, **options)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_export_writes_a_file_object_once_the_graph_verifies(dynamo: bool, tmp_path, monkeypatch) -> None:
    import io

    import fxpool.verifying as export_module

    buffer = io.BytesIO()
    result = fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), buffer, dynamo=dynamo)
    assert result.path == "<file object>" and result.max_abs_error < 1e-5
    assert {"Gather", "Div"} <= set(op_histogram_of(buffer.getvalue()))  # 10 -> 7: window sums
    monkeypatch.setattr(export_module, "run_onnxruntime", lambda path, args, **_: [torch.zeros(1, 4, 7, 7).numpy()])
    failing = io.BytesIO()
    with pytest.raises(fxpool.ExportVerificationError, match="Nothing was written to the file object"):
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), failing, dynamo=dynamo)
    assert failing.getvalue() == b""


def op_histogram_of(data: bytes) -> set[str]:
    return {node.op_type for node in onnx.load_from_string(data).graph.node}


def test_export_to_a_missing_folder_says_so_before_exporting(tmp_path) -> None:
    with pytest.raises(fxpool.OutputFileError, match="does not exist; create it first"):
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "no" / "m.onnx")


def test_export_prints_nothing_on_success(tmp_path) -> None:
    # In a process of its own, so that the exporters' warnings and log lines reach its stderr.
    script = f"""
import torch, fxpool
from torch import nn
model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(7)).eval()
for dynamo in (False, True):
    fxpool.export(model, torch.randn(1, 3, 10, 10), {str(tmp_path)!r} + f"/m{{dynamo}}.onnx", dynamo=dynamo)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr == "", run.stdout + run.stderr


class _ExportOnlyPool(nn.Module):
    """A pool fxpool cannot trace (it branches on export), so the exporter translation lowers it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            return F.adaptive_avg_pool2d(x, (7, 5))
        return F.adaptive_avg_pool2d(x, (7, 5))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_an_export_time_pool_in_bfloat16_exports_with_bfloat16_weights(dynamo: bool, tmp_path) -> None:
    # numpy has no bfloat16: the dynamo translation had failed with "unsupported ScalarType BFloat16".
    # onnxruntime's CPU kernels lack bfloat16 for some ops, so the graph is checked, not run.
    path = tmp_path / "bf16.onnx"
    x = torch.randn(1, 3, 10, 10, dtype=torch.bfloat16)
    with fxpool.onnx_export_hook():
        torch.onnx.export(_ExportOnlyPool().eval(), (x,), str(path), dynamo=dynamo)
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert {"Gather", "Div"} <= {node.op_type for node in model.graph.node}  # 10 -> 7 x 5: window sums, in float32
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_an_export_holds_no_weights_for_its_pools_and_names_their_nodes(dynamo: bool, tmp_path) -> None:
    # quantizers take MatMul/Gemm/Conv operands as weights: the pools must give them none to round
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(7), nn.Conv2d(4, 4, 1), nn.AdaptiveAvgPool2d((3, 5))).eval()
    x = torch.randn(1, 3, 33, 33)  # 33 -> 7 by window slices, then 7 -> (3, 5) by an AvgPool and sliding windows
    result = fxpool.export(model, x, tmp_path / "p.onnx", dynamo=dynamo)
    assert not {"MatMul", "Gemm"} & set(result.op_histogram), result.op_histogram
    einsums = [node for node in onnx.load(str(tmp_path / "p.onnx")).graph.node if node.op_type == "Einsum"]
    assert all(len(node.input) == 1 for node in einsums)  # the window sums' reductions: no second operand
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5
    assert set(result.pool_nodes) == {"1", "3"} and all(result.pool_nodes.values()), result.pool_nodes


def test_a_conversion_has_no_linear_under_torch_export() -> None:
    """PyTorch 2 export quantizers (XNNPACK's) quantize every aten.linear; the replacements hold none."""
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(7), nn.Conv2d(4, 4, 1), nn.AdaptiveAvgPool2d((3, 5))).eval()
    x = torch.randn(1, 3, 33, 33)
    program = torch.export.export(fxpool.convert(model, x), (x,))
    torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert not targets & {"aten.linear.default", "aten.matmul.default", "aten.mm.default", "aten.bmm.default"}, targets


MISSING = {  # name: (module made unimportable, export options, the extra the message must name)
    "dynamo without onnxscript": ("onnxscript", {"dynamo": True}, "onnx"),
    "torchscript without onnx": ("onnx", {"dynamo": False}, "onnx"),
    "verify without onnxruntime": ("onnxruntime", {"dynamo": False}, "onnx"),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_a_missing_optional_dependency_names_the_pip_line_before_any_conversion(case: str, tmp_path, monkeypatch) -> None:
    import fxpool.exporting

    module, options, extra = MISSING[case]
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError, as if not installed
    monkeypatch.setattr(fxpool.exporting, "convert", lambda *a, **k: pytest.fail("converted before the dependency check"))
    with pytest.raises(fxpool.MissingDependencyError) as raised:
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", **options)
    assert f"needs {module}, which failed to import" in str(raised.value)
    assert f'the packages of fxpool\'s "{extra}" extra' in str(raised.value)
    assert not (tmp_path / "m.onnx").exists()


def test_without_onnxruntime_an_unverified_export_still_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    result = fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=False, verify=False)
    assert result.max_abs_error is None and result.verified == "" and result.op_histogram.get("Conv") == 1


def opset_of(path) -> int:
    return next(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("opset", [11, 17, 99])
def test_the_dynamo_exporter_refuses_an_opset_it_would_not_write_before_converting(opset: int, tmp_path, monkeypatch) -> None:
    import fxpool.exporting

    monkeypatch.setattr(fxpool.exporting, "convert", lambda *a, **k: pytest.fail("converted before the opset check"))
    with pytest.raises(fxpool.UnsupportedOpsetError) as raised:
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=True, opset_version=opset)
    low, high = fxpool.exporting.supported_opsets(dynamo=True)
    assert low == 18 and high >= 23
    message = str(raised.value)
    assert f"opset_version={opset}: the dynamo exporter writes opsets 18 to {high}" in message
    assert "TorchScript exporter (dynamo=False, --exporter torchscript), which writes opsets 7 to 20" in message
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("opset", [6, 21])
def test_the_torchscript_exporter_refuses_an_opset_outside_7_to_20(opset: int, tmp_path) -> None:
    with pytest.raises(
        fxpool.UnsupportedOpsetError, match=f"opset_version={opset}: the TorchScript exporter writes opsets 7 to 20"
    ):
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=False, opset_version=opset)


@pytest.mark.parametrize("dynamo,opset", [(False, 11), (True, 18), (True, 21)])
def test_an_opset_in_range_is_the_opset_written(dynamo: bool, opset: int, tmp_path) -> None:
    fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=dynamo, opset_version=opset)
    assert opset_of(tmp_path / "m.onnx") == opset


def test_exporter_log_lines_go_to_fxpools_log_and_a_changed_request_warns(caplog) -> None:
    import logging

    from fxpool.exporting import _exporter_logs_to_fxpool

    exporter = logging.getLogger("torch.onnx._internal.exporter._compat")
    before = (logging.getLogger("torch.onnx").propagate, list(logging.getLogger("torch.onnx").handlers))
    with caplog.at_level(logging.DEBUG, logger="fxpool.exporters"), _exporter_logs_to_fxpool(("torch.onnx",)):
        exporter.warning("torchvision is not installed. Skipping torchvision::nms")
        with pytest.warns(fxpool.FxpoolWarning, match="operator set version 18"):
            exporter.warning("Setting ONNX exporter to use operator set version 18 because the requested opset_version 11 is lower")
    relayed = [r.getMessage() for r in caplog.records if r.name == "fxpool.exporters"]
    assert len(relayed) == 2 and "Skipping torchvision::nms" in relayed[0], relayed
    assert all(r.levelname == "DEBUG" for r in caplog.records if r.name == "fxpool.exporters")
    assert (logging.getLogger("torch.onnx").propagate, logging.getLogger("torch.onnx").handlers) == before  # put back


def test_export_warns_only_of_pools_the_export_leaves(tmp_path, recwarn) -> None:
    fxpool.export(_ExportOnlyPool().eval(), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=False)  # lowered at export
    assert not [w for w in recwarn if issubclass(w.category, fxpool.FxpoolWarning)]
    with pytest.warns(fxpool.UnconvertedPoolWarning, match="the export leaves to the stock exporter"):
        with pytest.raises(fxpool.ExportFailedError):  # the warning comes first, the exporter then fails on that pool
            fxpool.export(
                IndicesHead().eval(), torch.randn(1, 3, 10, 10), tmp_path / "i.onnx", dynamo=False, verify=False, dynamic=True
            )


@pytest.mark.parametrize("spec", ["dynamic_axes", "dynamic_shapes"])
def test_dynamo_axis_names_that_look_like_torch_export_symbols_are_refused_before_any_work(spec: str, tmp_path) -> None:
    """torch.onnx renames its symbols to the names given one after another: s53 -> s0, then s0 -> s1, so the
    height's window count was named after the width, and onnxruntime failed where the two differ (4->7 max,
    exported at 4x5, run at 8x6). TorchScript keeps the names as given."""
    x = torch.randn(1, 3, 4, 5)
    names = {"x": {2: "s0", 3: "s1"}} if spec == "dynamic_axes" else ({2: "s0", 3: "s1"},)
    with pytest.raises(fxpool.ExportRequestError, match=r"\['s0', 's1'\] look like torch.export's own symbols"):
        fxpool.export(
            nn.AdaptiveMaxPool2d(7), x, tmp_path / "m.onnx", dynamo=True, dynamic=True, input_names=["x"], **{spec: names}
        )
    assert not (tmp_path / "m.onnx").exists()
    fxpool.export(
        nn.AdaptiveMaxPool2d(7),
        x,
        tmp_path / "t.onnx",
        dynamo=False,
        dynamic=True,
        input_names=["x"],
        dynamic_axes={"x": {2: "s0", 3: "s1"}},
    )
