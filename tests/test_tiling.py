"""The dynamo ONNX exporter's If for average windows that tile (``fxpool.tiling``), through plain ``torch.onnx.export``.

A ``dynamic=True`` average graph from the dynamo exporter reshapes and reduces once where every pooled length is a
multiple of its output size, and gathers the windows elsewhere. Exact in onnxruntime and OpenVINO at sizes on both
sides of the branch, with NaN and ±inf (to 1e-5 against float32 PyTorch), under named Dims, which reshapes at
symbolic sizes in PyTorch would refuse. Max pools (bit for bit, same sizes) keep the gathers: OpenVINO rewrites a
Reshape and ReduceMax into a MaxPool, which dropped NaN. No other exporter or program gets a branch.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from inputs import with_non_finite
from torch import nn
from torch.export import Dim

import fxpool

onnxruntime = pytest.importorskip("onnxruntime")

POOLS = {  # name: (pool, example spatial size, sizes to run at: tiling ones (short and long blocks) first, then others)
    "1d 6": (lambda family: getattr(nn, f"Adaptive{family}Pool1d")(6), (13,), [(12,), (48,), (6,), (18,), (7,), (4,), (2,)]),
    "2d 7x5": (
        lambda family: getattr(nn, f"Adaptive{family}Pool2d")((7, 5)),
        (10, 10),
        [(14, 10), (56, 40), (56, 10), (7, 5), (21, 5), (14, 11), (8, 5), (3, 4)],
    ),
    "2d None x4": (lambda family: getattr(nn, f"Adaptive{family}Pool2d")((None, 4)), (5, 9), [(5, 8), (9, 32), (3, 4), (6, 9)]),
    "3d 3x7x7": (
        lambda family: getattr(nn, f"Adaptive{family}Pool3d")((3, 7, 7)),
        (5, 10, 10),
        [(6, 14, 14), (24, 56, 56), (3, 7, 7), (6, 14, 15), (2, 5, 9)],
    ),
}


def export_dynamic(converted: nn.Module, x: torch.Tensor, path: str, shapes: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (x,), path, dynamo=True, dynamic_shapes=shapes, input_names=["x"])


def graph_ops(path: str) -> set[str]:
    """The graph's op types (subgraphs included), after checking that every initializer is used: the exporter
    drops a no-op Slice inside an If but keeps its bounds, and onnxruntime warns of each one left."""
    import onnx

    from fxpool.verifying import op_histogram

    model, used = onnx.load(path), set()
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            used.update(node.input)
            graphs += [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    assert not {i.name for i in model.graph.initializer} - used
    return set(op_histogram(path))


@pytest.mark.parametrize("family", ["Avg", "Max"])
@pytest.mark.parametrize("case", list(POOLS))
def test_the_dynamo_graph_reshapes_where_windows_tile_and_gathers_elsewhere(case: str, family: str, tmp_path) -> None:
    make, spatial, sizes = POOLS[case]
    pool = make(family)
    x = torch.randn(2, 3, *spatial)
    converted = fxpool.convert(pool, x, dynamic=True)
    path = str(tmp_path / "pool.onnx")
    export_dynamic(converted, x, path, ({2 + a: Dim(f"d{a}", min=2, max=64) for a in range(len(spatial))},))
    ops = graph_ops(path)
    assert ("If" in ops) is (family == "Avg") and {"Reshape", "Gather"} <= ops, ops
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for size in sizes:
        y = with_non_finite((2, 3, *size), seed=sum(size), every=12)
        ours, theirs = torch.from_numpy(session.run(None, {"x": y.numpy()})[0]), pool(y)
        tolerance = 0.0 if family == "Max" else 1e-5
        torch.testing.assert_close(ours, theirs, rtol=tolerance, atol=tolerance, equal_nan=True, msg=f"{case} at {size}")


@pytest.mark.parametrize(("size", "reduction"), [((14, 21), "ReduceMean"), ((56, 63), "ReduceSum")], ids=["short", "long"])
def test_a_static_export_of_a_dynamic_conversion_at_a_tiling_size_reshapes_without_a_branch(size, reduction, tmp_path) -> None:
    pool = nn.AdaptiveAvgPool2d(7)
    converted = fxpool.convert(pool, torch.randn(1, 3, 10, 10), dynamic=True)
    x = with_non_finite((1, 3, *size), seed=0, every=12)
    path = str(tmp_path / "static.onnx")
    export_dynamic(converted, x, path, None)
    ops = graph_ops(path)
    assert {"Reshape", reduction} <= ops and not {"If", "Gather", "Where"} & ops, ops
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = torch.from_numpy(session.run(None, {"x": x.numpy()})[0])
    torch.testing.assert_close(ours, pool(x), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_programs_for_pytorch_runtimes_and_dynamo_itself_keep_one_graph(strict: bool) -> None:
    """``torch.export`` for ExecuTorch or AOTInductor keeps the gathers for every size; so does the dynamo exporter's
    strict capture, where dynamo would guard on the branch's condition instead of keeping it."""
    from torch.onnx._internal.exporter import _flags

    converted = fxpool.convert(nn.AdaptiveAvgPool2d(7), torch.randn(1, 3, 10, 10), dynamic=True)
    x = torch.randn(1, 3, 14, 14)
    shapes = {"x": {2: Dim.DYNAMIC, 3: Dim.DYNAMIC}}
    program = torch.export.export(converted, (x,), dynamic_shapes=shapes, strict=strict)
    assert "cond" not in str(program.graph_module.code)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_flags, "_is_onnx_exporting", True)
        program = torch.export.export(converted, (x,), dynamic_shapes=shapes, strict=strict)
    assert ("cond" in str(program.graph_module.code)) is not strict


def test_openvino_runs_the_branch_exactly(tmp_path) -> None:
    openvino = pytest.importorskip("openvino")
    pool = nn.AdaptiveAvgPool2d((7, 5))
    x = torch.randn(2, 3, 10, 10)
    path = str(tmp_path / "pool.onnx")
    export_dynamic(fxpool.convert(pool, x, dynamic=True), x, path, ({2: Dim.DYNAMIC, 3: Dim.DYNAMIC},))
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for size in [(14, 10), (7, 5), (10, 10), (21, 16)]:
        y = with_non_finite((2, 3, *size), seed=sum(size), every=12)
        ours = torch.from_numpy(compiled([y.numpy()])[0])
        torch.testing.assert_close(ours, pool(y), rtol=1e-5, atol=1e-5, equal_nan=True, msg=str(size))
