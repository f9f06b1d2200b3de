"""fxpool.verifying: onnxruntime against PyTorch, the bound it holds, and low-precision graphs.

onnxruntime's CPU provider has no bfloat16 (nor, on x86, float16) Conv, so such a graph cannot run as
exported; its float32 copy is verified against a float32 copy of the model instead, and the result
says so. Tolerances: float32, rtol 1e-4 and atol 1e-5 times the output's scale (fxpool.export's own).
"""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

import fxpool
from fxpool import verifying
from fxpool.verifying import float32_copy, op_histogram


def pooled(output: tuple[int, int]) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(output)).eval()


def test_failed_verification_raises_and_moves_the_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(verifying, "run_onnxruntime", lambda path, args, **_: [torch.zeros(1, 4, 7, 7).numpy()])
    with pytest.raises(fxpool.ExportVerificationError, match="differs from PyTorch by up to"):
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=False)
    assert (tmp_path / "m.onnx.failed").exists() and not (tmp_path / "m.onnx").exists()


class Scale(nn.Module):
    def __init__(self, factor: torch.Tensor) -> None:
        super().__init__()
        self.factor = float(factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


@pytest.mark.parametrize("offset,passes", [(1e-3, True), (1.0, False)])
def test_verification_tolerance_scales_with_the_output(offset: float, passes: bool, tmp_path, monkeypatch) -> None:
    # Outputs near 1e4 (deep nets with random weights): a float32-sized 1e-3 offset passes, 1.0 does not.
    model, x = pooled((7, 7)), torch.randn(1, 3, 10, 10)
    with torch.no_grad():
        expected = model(x)
    scale = 1e4 / expected.abs().max()
    model = nn.Sequential(model, Scale(scale))
    monkeypatch.setattr(verifying, "run_onnxruntime", lambda path, args, **_: [(expected * scale + offset).numpy()])
    if passes:
        fxpool.export(model, x, tmp_path / "m.onnx", dynamo=False)
    else:
        with pytest.raises(fxpool.ExportVerificationError, match="output scale"):
            fxpool.export(model, x, tmp_path / "m.onnx", dynamo=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_a_low_precision_model_exports_and_verifies_saying_how(dtype: torch.dtype, dynamo: bool, tmp_path) -> None:
    if dtype == torch.float16 and not dynamo:
        pytest.skip("the TorchScript exporter's float16 Conv on the CPU: torch has no CPU float16 conv to trace")
    model = pooled((7, 5)).to(dtype)
    x = torch.randn(1, 3, 10, 10, dtype=dtype)
    result = fxpool.export(model, x, tmp_path / "low.onnx", dynamo=dynamo)
    if dtype == torch.bfloat16:  # no bfloat16 Conv on onnxruntime's CPU provider
        assert "float32 copy of the graph" in result.verified and "cannot run the bfloat16" in result.verified, result.verified
        assert result.max_abs_error is not None and result.max_abs_error < 1e-4
    else:  # float16 runs as exported (within four float16 units of the last place)
        assert result.max_abs_error is not None and result.max_abs_error < 4e-3
    graph = onnx.load(str(tmp_path / "low.onnx"))  # the file written is the low-precision graph itself
    expected = onnx.TensorProto.BFLOAT16 if dtype == torch.bfloat16 else onnx.TensorProto.FLOAT16
    assert graph.graph.output[0].type.tensor_type.elem_type == expected
    assert {"Gather", "Div"} <= set(op_histogram(str(tmp_path / "low.onnx")))  # 10 -> 7: window sums


def test_a_float32_model_verifies_as_exported(tmp_path) -> None:
    result = fxpool.export(pooled((7, 5)), torch.randn(1, 3, 10, 10), tmp_path / "f32.onnx", dynamo=True)
    assert result.verified.startswith("onnxruntime (CPU) on the graph as exported")


def test_the_float32_copy_widens_every_tensor_cast_and_type() -> None:
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(torch.tensor([[0.5, 1.5]], dtype=torch.float32).numpy(), "w")
    weight_bf16 = helper.make_tensor("w", TensorProto.BFLOAT16, [1, 2], [0.5, 1.5])
    nodes = [
        helper.make_node("Cast", ["x"], ["xl"], to=TensorProto.BFLOAT16),
        helper.make_node("MatMul", ["xl", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 2])],
        [weight_bf16],
    )
    widened = float32_copy(helper.make_model(graph))
    assert widened.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert widened.graph.initializer[0].data_type == TensorProto.FLOAT
    assert numpy_helper.to_array(widened.graph.initializer[0]).tolist() == numpy_helper.to_array(weight).tolist()
    assert widened.graph.node[0].attribute[0].i == TensorProto.FLOAT
    onnx.checker.check_model(widened)


def test_a_graph_that_fails_for_another_reason_still_fails(tmp_path, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel for this op")

    monkeypatch.setattr(verifying, "run_onnxruntime", broken)
    with pytest.raises(fxpool.ExportVerificationError, match="does not load or run: no kernel"):
        fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=False)


@pytest.mark.cuda
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_a_cuda_model_exports_and_verifies_against_its_cuda_outputs(dynamo: bool, tmp_path) -> None:
    model = pooled((7, 5)).cuda()
    x = torch.randn(2, 3, 10, 10, device="cuda")
    result = fxpool.export(model, x, tmp_path / "cuda.onnx", dynamo=dynamo)
    assert result.max_abs_error is not None and result.max_abs_error < 1e-4
    assert next(model.parameters()).device.type == "cuda"  # the caller's model stays where it was


class AddsItsTracedHeight(nn.Module):
    """Right at the size traced, wrong at any other: ``int`` makes the height a constant of the trace."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + int(x.shape[2])


def test_a_graph_exact_at_the_example_but_wrong_within_its_dynamic_axes_is_refused(tmp_path) -> None:
    axes = {"x": {2: "h", 3: "w"}}
    with pytest.raises(fxpool.ExportVerificationError, match=r"not at x \(1, 3, 16, 16\), within its dynamic axes"):
        fxpool.export(
            AddsItsTracedHeight(), torch.randn(1, 3, 8, 8), tmp_path / "m.onnx", dynamo=False, input_names=["x"], dynamic_axes=axes
        )
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_a_dynamic_conversion_is_verified_at_a_second_size_too(dynamo: bool, tmp_path) -> None:
    x = torch.randn(1, 3, 10, 12)
    if dynamo:
        shapes = {"options": {"dynamic_shapes": ({2: torch.export.Dim("h"), 3: torch.export.Dim("w")},)}}
    else:
        shapes = {"options": {"input_names": ["x"], "dynamic_axes": {"x": {2: "h", 3: "w"}}}}
    result = fxpool.export(pooled((7, 5)), x, tmp_path / "m.onnx", dynamo=dynamo, dynamic=True, **shapes["options"])
    assert "at the example's size and at" in result.verified and "(1, 3, 12, 16)" in result.verified, result.verified


def test_a_static_export_is_verified_at_the_example_only(tmp_path) -> None:
    result = fxpool.export(pooled((7, 7)), torch.randn(1, 3, 10, 10), tmp_path / "m.onnx", dynamo=False)
    assert result.verified == "onnxruntime (CPU) on the graph as exported, against the model"


def test_the_op_histogram_counts_subgraphs_inside_functions_too(tmp_path) -> None:
    from onnx import helper

    branch = helper.make_graph([helper.make_node("Abs", ["x"], ["y"])], "branch", [], [helper.make_tensor_value_info("y", 1, None)])
    inside = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    function = helper.make_function("local", "f", ["c", "x"], ["y"], [inside], [helper.make_opsetid("", 18)])
    call = helper.make_node("f", ["c", "x"], ["y"], domain="local")
    graph = helper.make_graph(
        [call],
        "g",
        [helper.make_tensor_value_info("c", 9, []), helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("y", 1, [2])],
    )
    model = helper.make_model(
        graph, functions=[function], opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert op_histogram(str(path)) == {"Abs": 2, "If": 1, "f": 1}


@pytest.mark.parametrize(("length", "grown"), [(512, 640), (224, 256), (7, 8), (8, 16)])
def test_the_second_size_grows_an_axis_by_a_power_of_two_that_divides_it_and_at_most_a_quarter_or_32(
    length: int, grown: int, tmp_path
) -> None:
    model = nn.Sequential(nn.AdaptiveAvgPool1d(5))
    options = {"input_names": ["x"], "dynamic_axes": {"x": {2: "length"}}}
    result = fxpool.export(model, torch.randn(1, 2, length), tmp_path / "m.onnx", dynamo=False, dynamic=True, **options)
    assert result.verified.endswith(f"at x (1, 2, {grown})"), result.verified


def test_a_model_returning_its_input_is_refused_with_the_exporters_naming_and_the_fix(tmp_path) -> None:
    """torch.onnx's dynamo exporter (2.14) writes ``Identity(x) -> x`` for a model that returns its input where
    input_names repeats the forward's parameter name (nn.Identity too): not valid ONNX. fxpool.export says why and
    what to pass; with output_names the same export verifies."""
    pool, x = nn.AdaptiveAvgPool2d(7), torch.randn(1, 3, 7, 7)  # an identity at 7x7, forward(self, x)
    path = tmp_path / "identity.onnx"
    with pytest.raises(fxpool.ExportVerificationError, match=r"returns its input 'x' unchanged.*pass output_names"):
        fxpool.export(pool, x, str(path), dynamo=True, input_names=["x"])
    assert not path.exists()
    fxpool.export(pool, x, str(path), dynamo=True, input_names=["x"], output_names=["y"])
    assert [o.name for o in onnx.load(str(path)).graph.output] == ["y"]
