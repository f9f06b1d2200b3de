"""The benchmark suite's pieces: its baseline computes the right function, and each section runs.

Speed itself is measured by ``python -m model_zoo_checks.benchmarks``, never asserted here.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from model_zoo_checks import benchmarks


@pytest.mark.parametrize("family", ["avg", "max"])
@pytest.mark.parametrize("in_sizes,out_sizes", [((10, 10), (7, 7)), ((33, 33), (6, 6)), ((4, 5), (6, 6))])
def test_slice_loop_baseline_is_the_adaptive_pool(family: str, in_sizes: tuple, out_sizes: tuple) -> None:
    x = torch.randn(2, 3, *in_sizes, dtype=torch.float64)
    native = F.adaptive_avg_pool2d if family == "avg" else F.adaptive_max_pool2d
    torch.testing.assert_close(benchmarks.SliceLoopPool(out_sizes, family)(x), native(x, out_sizes), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_eager_and_onnx_cases_time_every_contender(family: str, tmp_path) -> None:
    row = benchmarks.eager_case(family, (1, 8, 10, 10), (7, 7), repeats=1)
    assert set(row) == {f"{p}_{c}" for p in ("fwd", "fwdbwd") for c in ("native", "fxpool", "slice_loop")}
    assert all(t > 0 for t in row.values())
    onnx_row = benchmarks.onnx_case(family, (1, 8, 10, 10), (7, 7), repeats=1, workdir=str(tmp_path))
    assert onnx_row["ort_fxpool"] > 0
    # The dynamo exporter translates the average original (to its gather form) but not the max one.
    assert ("ort_dynamo_original" in onnx_row) == (family == "avg"), onnx_row


@pytest.mark.parametrize("family", ["avg", "max"])
def test_the_runtime_case_times_every_form_at_the_given_threads(family: str, tmp_path) -> None:
    row = benchmarks.runtime_case(family, (1, 8, 10, 10), (7, 7), repeats=1, workdir=str(tmp_path), threads=1)
    forms = {"ort_fxpool", "ort_fxpool_dynamic", "ort_floor", "eager_native", "eager_fxpool", "eager_fxpool_dynamic", "eager_floor"}
    forms |= {"openvino_native", "ort_fxpool_steps"}  # 10->7 exports a window form: its steps graph is timed beside it
    assert set(row) == {f"t1_{form}" for form in forms}
    assert all(t > 0 for t in row.values())


def test_average_form_rows_time_every_form_and_leave_the_planner_as_it_was(monkeypatch) -> None:
    from fxpool import planning

    monkeypatch.setattr(benchmarks, "AVERAGE_FORM_CASES", (((1, 4, 10, 10), (7, 7)), ((1, 4, 64, 64), (6, 6))))
    names = ("SLIDING_MAX_LENGTH", "SLICES_MAX_WINDOWS", "WINDOW_SUMS_MIN_COPIES")
    limits = [getattr(planning, name) for name in names]
    rows = benchmarks.average_forms_section(repeats=1)
    assert [getattr(planning, name) for name in names] == limits
    assert [r["picked"] for r in rows] == ["window", "slices"]
    assert all(r[f"ort_{form}"] > 0 for r in rows for form in ("sliding", "slices", "gather", "window"))


def test_block_rows_time_each_form_as_exported_and_leave_the_planner_as_it_was(tmp_path) -> None:
    """Each forced form is what its graph holds (the pool as 2d AveragePools, the blocks without one, pool_nd ONNX's
    3d AveragePool), and the pick is the planner's at the thresholds it had before."""
    import onnx

    from fxpool import forms, planning
    from model_zoo_checks import block_benchmarks

    thresholds, as_2d = dict(planning.BLOCK_MIN_LENGTHS), forms.averages_as_2d
    row = block_benchmarks.block_case("avg", (1, 4, 8, 8, 8), (2, 2, 2), 1, str(tmp_path))
    assert planning.BLOCK_MIN_LENGTHS == thresholds and forms.averages_as_2d is as_2d
    kernels = {}
    for form in ("pool", "blocks", "pool_nd"):
        nodes = onnx.load(str(tmp_path / f"{form}.onnx")).graph.node
        kernels[form] = [len(a.ints) for n in nodes if n.op_type == "AveragePool" for a in n.attribute if a.name == "kernel_shape"]
    assert kernels == {"pool": [2, 2], "blocks": [], "pool_nd": [3]}
    assert row["picked"] == "pool" and all(row[f"{form}_s"] > 0 for form in kernels)
    cases = [("avg", (1, 4), (2, 2, 2), (8,)), ("max", (1, 4), (6,), (2, 8))]
    rows = block_benchmarks.blocks_section(repeats=1, cases=cases)
    picks = [(r["stride"], r["picked"], "pool_nd_s" in r) for r in rows]
    assert picks == [(8, "blocks", True), (2, "pool", False), (8, "blocks", False)]


@pytest.mark.cuda
def test_gpu_eager_case_in_every_dtype() -> None:
    for dtype in benchmarks.DTYPES.values():
        row = benchmarks.eager_case("avg", (2, 64, 10, 10), (7, 7), repeats=2, device="cuda", dtype=dtype)
        assert all(t > 0 for t in row.values())


def test_the_converted_graph_quantizes_as_the_docs_say(tmp_path) -> None:
    """Dynamic INT8 leaves every pool form in float (no MatMul): the stock graph's error. Static QDQ also
    rounds the steps of an uneven average pool (docs/limitations.md): kept in float by name
    (``ExportResult.pool_nodes``), the error is at most the stock graph's."""
    pytest.importorskip("onnxruntime.quantization")
    from model_zoo_checks import quantization

    cases = [(name, build(), shape) for name, build, shape in quantization.POOL_CASES if name.startswith(("10->7", "33->6"))]
    rows = quantization.case_rows(cases, tmp_path, tmp_path / "third-party.log")
    for row in rows:
        assert quantization.within_bounds(row, "dynamic") is True, row
        assert row["fxpool / dynamic"] == pytest.approx(row["original / dynamic"], rel=1e-3), row
        assert row["fxpool, pool in float / static QDQ"] <= 1.1 * row["original / static QDQ"], row
        for quantizer in ("NNCF", "pt2e XNNPACK"):  # None where not installed
            assert quantization.within_bounds(row, quantizer) is not False, row


@pytest.mark.parametrize("family", ["avg", "max"])
def test_the_dynamic_case_times_one_graph_at_three_sizes_against_every_contender(family: str, tmp_path) -> None:
    from model_zoo_checks import dynamic_benchmarks

    row = dynamic_benchmarks.dynamic_case(family, (1, 4, 10, 10), (7, 7), repeats=1, workdir=str(tmp_path))
    assert list(row["sizes"]) == ["10x10", "13x13", "7x7"] and row["form"].startswith("dynamic window")
    forms = {"dynamic", "dynamic_dynamo", "static", "floor", "openvino_dynamic"}
    for times in row["sizes"].values():
        assert {f"t{t}_{form}" for t in (1, 2) for form in forms} <= set(times)
        assert all(times[k] > 0 for k in times if k.startswith("t")) and 1 <= times["peak_over_in_out"] < 20
        if sys.platform == "linux":  # a few KB here: the meter's own test reads it on megabytes
            assert {"ort_peak_over_in_out", "ort_dynamo_peak_over_in_out"} <= set(times)


@pytest.mark.skipif(sys.platform != "linux", reason="reads the resident set from /proc")
def test_the_onnxruntime_peak_meter_reads_what_a_graph_holds(tmp_path) -> None:
    """Three copies of an 8 MB input concatenated, then summed: 4x the input at once over input plus a small
    output; a Relu's output is all it holds (1.0); both within 5%."""
    import onnx
    from onnx import TensorProto, helper

    from model_zoo_checks import dynamic_benchmarks

    def graph(name: str, nodes: list, out_shape: list) -> str:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 512, 64, 64])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
        model = helper.make_model(helper.make_graph(nodes, name, [x], [y]), opset_imports=[helper.make_opsetid("", 18)])
        path = str(tmp_path / f"{name}.onnx")
        onnx.save(model, path)
        return path

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    tripled = [
        helper.make_node("Concat", ["x", "x", "x"], ["t"], axis=1),
        helper.make_node("Constant", [], ["axes"], value=axes),
        helper.make_node("ReduceSum", ["t", "axes"], ["y"], keepdims=1),
    ]
    floor = [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=1)]
    paths = {
        "tripled": graph("tripled", tripled, ["n", 1, 64, 64]),
        "relu": graph("relu", [helper.make_node("Relu", ["x"], ["y"])], ["n", 512, 64, 64]),
        "floor": graph("floor", floor, [1, 1, 1, 1]),
    }
    peaks = dynamic_benchmarks.onnxruntime_peaks(paths, (1, 512, 64, 64))
    assert peaks["ort_tripled_over_in_out"] == pytest.approx(4 * 512 / 513, rel=0.05), peaks
    assert peaks["ort_relu_over_in_out"] == pytest.approx(1.0, rel=0.05), peaks
