"""The dynamo ONNX exporter's Ifs for windows that tile (``fxpool.tiling``), through plain ``torch.onnx.export``.

A ``dynamic=True`` graph from the dynamo exporter pools natively where one kernel and stride (at most 4) serve every
axis, average graphs reshape and reduce where every pooled length is a multiple of its output size, and the windows
are gathered elsewhere; a max pool takes the native arm, or windows reduced without the NaN and -inf flag, only
where its input is finite (onnxruntime's and OpenVINO's MaxPool skip NaN and give -3.4e38 for a window of -inf
alone, their ReduceMax likewise). Exact in onnxruntime and OpenVINO at
sizes on every side of the branches, with NaN and ±inf and without (to 1e-5 against float32 PyTorch, max pools bit
for bit), under named Dims, which reshapes at symbolic sizes in PyTorch would refuse. No other exporter or program
gets a branch.
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

POOLS = {  # name: (pool, example spatial size, sizes to run at: native, reshaped (short and long blocks), then others)
    "1d 6": (
        lambda family: getattr(nn, f"Adaptive{family}Pool1d")(6),
        (13,),
        [(6,), (7,), (12,), (13,), (18,), (19,), (24,), (25,), (48,), (30,), (31,), (4,), (2,), (14,)],
    ),
    "2d 7x5": (
        lambda family: getattr(nn, f"Adaptive{family}Pool2d")((7, 5)),
        (10, 10),
        [(7, 5), (8, 6), (14, 10), (15, 11), (29, 21), (14, 11), (56, 40), (56, 10), (21, 5), (8, 5), (3, 4), (36, 26)],
    ),
    "2d None x4": (
        lambda family: getattr(nn, f"Adaptive{family}Pool2d")((None, 4)),
        (5, 9),
        [(5, 4), (3, 9), (5, 8), (9, 32), (3, 5), (6, 10)],
    ),
    "3d 3x7x7": (
        lambda family: getattr(nn, f"Adaptive{family}Pool3d")((3, 7, 7)),
        (5, 10, 10),
        [(3, 7, 7), (7, 15, 15), (6, 14, 14), (24, 56, 56), (6, 14, 15), (2, 5, 9)],
    ),
}


def finite_and_not(shape: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    """Inputs with NaN and ±inf, and the same with every non-finite entry 0 (a max pool's native arm takes those)."""
    y = with_non_finite(shape, seed=seed, every=12)
    return [y, y.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)]


def export_dynamic(converted: nn.Module, x: torch.Tensor, path: str, shapes: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (x,), path, dynamo=True, dynamic_shapes=shapes, input_names=["x"])


def every_graph(path: str) -> list:
    """The model's graph and every If branch inside it, nested ones included (the main graph first)."""
    import onnx

    graphs = [onnx.load(path).graph]
    for graph in graphs:  # grows as branches are found
        graphs += [a.g for node in graph.node for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    return graphs


def graph_ops(path: str) -> set[str]:
    """The graph's op types (subgraphs included), after checking that every initializer is used: the exporter
    drops a no-op Slice inside an If but keeps its bounds, and onnxruntime warns of each one left."""
    from fxpool.verifying import op_histogram

    graphs = every_graph(path)
    used = {name for graph in graphs for node in graph.node for name in node.input}
    assert not {i.name for i in graphs[0].initializer} - used
    return set(op_histogram(path))


def pool_ranks(path: str) -> set[int]:
    """How many axes the graph's AveragePools and MaxPools pool (subgraphs included)."""
    nodes = [node for graph in every_graph(path) for node in graph.node if node.op_type in ("AveragePool", "MaxPool")]
    return {len(a.ints) for node in nodes for a in node.attribute if a.name == "kernel_shape"}


@pytest.mark.parametrize("family", ["Avg", "Max"])
@pytest.mark.parametrize("case", list(POOLS))
def test_the_dynamo_graph_pools_natively_or_reshapes_where_windows_tile_and_gathers_elsewhere(
    case: str, family: str, tmp_path
) -> None:
    make, spatial, sizes = POOLS[case]
    pool = make(family)
    x = torch.randn(2, 3, *spatial)
    converted = fxpool.convert(pool, x, dynamic=True)
    path = str(tmp_path / "pool.onnx")
    export_dynamic(converted, x, path, ({2 + a: Dim(f"d{a}", min=2, max=64) for a in range(len(spatial))},))
    ops = graph_ops(path)
    native = {"Avg": {"AveragePool", "Reshape"}, "Max": {"MaxPool", "ReduceL1"}}[family]
    assert {"If", "Gather"} | native <= ops, ops
    assert pool_ranks(path) == ({2} if family == "Avg" else {len(spatial)})  # 1d and 3d averages pool as 2d
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for size in sizes:
        for y in finite_and_not((2, 3, *size), seed=sum(size)):
            ours, theirs = torch.from_numpy(session.run(None, {"x": y.numpy()})[0]), pool(y)
            tolerance = 0.0 if family == "Max" else 1e-5
            torch.testing.assert_close(ours, theirs, rtol=tolerance, atol=tolerance, equal_nan=True, msg=f"{case} at {size}")


def test_the_branch_conditions_match_the_window_arithmetic_exhaustively() -> None:
    """:func:`fxpool.tiling.window_conditions` on every pair of small lengths and output sizes (1d and 2d), against
    ``uniform_stride`` and ``reshapes_into_blocks``: where it sends a pool to a native arm, that arm's kernel and
    stride are PyTorch's windows on every axis."""
    import itertools

    from fxpool.tiling import NATIVE_STRIDES, window_conditions
    from fxpool.windows import reshapes_into_blocks, uniform_stride

    pairs = [(length, size) for length in range(1, 26) for size in range(1, 9)]
    for axes in itertools.chain(([p] for p in pairs), itertools.product(pairs[::3], repeat=2)):
        lengths, sizes = torch.tensor([length for length, _ in axes]), torch.tensor([size for _, size in axes])
        uniform, key, tiles, shortest = window_conditions(lengths, sizes)
        pools = {uniform_stride(length, size) for length, size in axes}
        (kernel, stride) = next(iter(pools)) if len(pools) == 1 and None not in pools else (0, 0)
        assert bool(uniform) == (1 <= stride <= NATIVE_STRIDES and kernel - stride in (0, 1)), axes
        if uniform:
            assert int(key) == 2 * stride + kernel - stride, axes
        assert bool(tiles) == all(reshapes_into_blocks(length, size) for length, size in axes), axes
        assert int(shortest) == min(length // size for length, size in axes), axes


@pytest.mark.parametrize(
    ("family", "size", "nodes"),
    [
        ("Avg", (14, 21), {"Reshape", "ReduceMean"}),
        ("Avg", (56, 63), {"Reshape", "ReduceSum"}),
        ("Avg", (15, 15), {"AveragePool"}),
        ("Max", (15, 15), {"MaxPool", "ReduceL1", "If", "Gather", "Where"}),
        ("Avg", (14, 21, 14), {"Reshape", "ReduceMean"}),
        ("Avg", (14,), {"AveragePool"}),
        ("Avg", (15, 15, 15), {"AveragePool"}),
        ("Max", (14, 14, 14), {"MaxPool", "ReduceL1", "If", "Gather", "Where"}),
    ],
    ids=["short blocks", "long blocks", "native", "native max", "3d blocks", "1d native", "3d native", "3d native max"],
)
def test_a_static_export_of_a_dynamic_conversion_at_a_tiling_size_takes_its_arm_alone(family, size, nodes, tmp_path) -> None:
    """The arm is chosen at export: no If but a max pool's NaN check, no gathers but in the max pool's NaN arm (whose
    flagged maximum's Where gives -inf to windows of -inf alone).
    1d and 3d averages pool as 2d AveragePools (:func:`fxpool.tiling.average_pool_as_2d`)."""
    pool = getattr(nn, f"Adaptive{family}Pool{len(size)}d")(7)
    converted = fxpool.convert(pool, torch.randn(1, 3, *(10,) * len(size)), dynamic=True)
    x = torch.randn(1, 3, *size)
    path = str(tmp_path / "static.onnx")
    export_dynamic(converted, x, path, None)
    ops = graph_ops(path)
    assert nodes <= ops and not {"If", "Gather", "Where"} - nodes & ops, ops
    assert pool_ranks(path) <= ({2} if family == "Avg" else {len(size)})
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for y in finite_and_not((1, 3, *size), seed=0):
        ours = torch.from_numpy(session.run(None, {"x": y.numpy()})[0])
        tolerance = 0.0 if family == "Max" else 1e-5
        torch.testing.assert_close(ours, pool(y), rtol=tolerance, atol=tolerance, equal_nan=True)


def branch_ops(path: str) -> list[set[str]]:
    """Each If branch's op types, its own nodes only (not its nested branches')."""
    return [{node.op_type for node in graph.node} for graph in every_graph(path)[1:]]


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic sizes", "static size"])
@pytest.mark.parametrize("size", [(10, 10), (12, 9, 11), (4, 5)], ids=["2d", "3d", "2d upsampling"])
def test_a_max_graph_reduces_finite_entries_without_the_flag(size: tuple[int, ...], dynamic: bool, tmp_path) -> None:
    """Where the windows do not tile, a max pool's ReduceL1 sends finite inputs to windows reduced by ReduceMax alone
    (0.4-0.8x the time in onnxruntime) and the others to the flagged windows (LeakyRelu, ReduceSum, ReduceMin); both
    exact, bit for bit. An upsampling example traces the block arm at blocks of no entries, where a PyTorch
    reduction would fail and the exporter fall back to dynamo's capture, which holds no If."""
    pool = getattr(nn, f"AdaptiveMaxPool{len(size)}d")(7)
    x = torch.randn(2, 3, *size)
    path = str(tmp_path / "max.onnx")
    dims = range(2, x.dim())
    export_dynamic(fxpool.convert(pool, x, dynamic=True), x, path, ({d: Dim.DYNAMIC for d in dims},) if dynamic else None)
    assert "ReduceL1" in graph_ops(path)
    branches = branch_ops(path)
    assert any("ReduceMax" in ops and not {"LeakyRelu", "ReduceMin"} & ops for ops in branches), branches
    assert any({"ReduceMax", "LeakyRelu", "ReduceSum", "ReduceMin"} <= ops for ops in branches), branches
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for run in [size] + ([tuple(s + 3 for s in size), tuple(s - 2 for s in size)] if dynamic else []):
        for y in finite_and_not((2, 3, *run), seed=sum(run)):
            ours = torch.from_numpy(session.run(None, {"x": y.numpy()})[0])
            torch.testing.assert_close(ours, pool(y), rtol=0, atol=0, equal_nan=True, msg=str(run))


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic sizes", "static size"])
def test_a_max_graph_reduces_finite_blocks_axis_by_axis_where_windows_tile(dynamic: bool, tmp_path) -> None:
    """Where every pooled length is a multiple of its output size and no native arm serves (strides 6 and 5 here,
    then 8 and 8), a max pool's finite input is Reshaped and reduced by ReduceMax axis by axis, as its static graph
    is, with no Transpose (the gathers' spatial-first copy) in that branch; inputs with NaN and ±inf take the
    flagged gathers. Bit for bit."""
    pool = nn.AdaptiveMaxPool2d((6, 4))
    x = torch.randn(2, 3, 36, 20)
    path = str(tmp_path / "max.onnx")
    export_dynamic(fxpool.convert(pool, x, dynamic=True), x, path, ({2: Dim.DYNAMIC, 3: Dim.DYNAMIC},) if dynamic else None)
    branches = branch_ops(path)
    assert any({"Reshape", "ReduceMax"} <= ops and not {"Transpose", "LeakyRelu"} & ops for ops in branches), branches
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for run in [(36, 20)] + ([(48, 32), (42, 24), (37, 21)] if dynamic else []):
        for y in finite_and_not((2, 3, *run), seed=sum(run)):
            ours = torch.from_numpy(session.run(None, {"x": y.numpy()})[0])
            torch.testing.assert_close(ours, pool(y), rtol=0, atol=0, equal_nan=True, msg=str(run))


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


@pytest.mark.parametrize("family", ["Avg", "Max"])
def test_openvino_runs_the_branches_exactly(family: str, tmp_path) -> None:
    openvino = pytest.importorskip("openvino")
    pool = getattr(nn, f"Adaptive{family}Pool2d")((7, 5))
    x = torch.randn(2, 3, 10, 10)
    path = str(tmp_path / "pool.onnx")
    export_dynamic(fxpool.convert(pool, x, dynamic=True), x, path, ({2: Dim.DYNAMIC, 3: Dim.DYNAMIC},))
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for size in [(14, 10), (7, 5), (15, 11), (29, 21), (10, 10), (21, 16)]:
        for y in finite_and_not((2, 3, *size), seed=sum(size)):
            ours = torch.from_numpy(compiled([y.numpy()])[0])
            tolerance = 0.0 if family == "Max" else 1e-5
            torch.testing.assert_close(ours, pool(y), rtol=tolerance, atol=tolerance, equal_nan=True, msg=str(size))
