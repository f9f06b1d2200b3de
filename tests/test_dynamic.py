"""fxpool.dynamic: the runtime-size forms against PyTorch at many sizes from one module, in eager and exported.

Average: float64 within 1e-12 in eager, float32 within 1e-5 in onnxruntime. Max: values bit for bit,
gradients (integer upstream gradients, so sums are exact) at exactly PyTorch's positions, ties and
all-``-inf`` windows included. NaN and ±inf are placed in every input, so each window form proves it keeps
them in their windows; exports are run at sizes the module was never built for.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import sys
import time
import warnings
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from inputs import integers_showing_shifted_windows, with_non_finite

import fxpool
from fxpool import dynamic as dynamic_module
from fxpool.dynamic import DynamicAdaptiveAvgPool, DynamicAdaptiveMaxPool
from fxpool.planning import choose_dynamic_form
from fxpool.windows import window_bounds
from model_zoo_checks.dynamic_benchmarks import PeakBytes  # the benchmark's meter: the test holds the same bound

AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
NATIVE = {"avg": AVG, "max": MAX}
MODULES = {"avg": DynamicAdaptiveAvgPool, "max": DynamicAdaptiveMaxPool}
OUTPUTS = [(5,), (1,), (7, 5), (3, None), (None, 4), (1, 6), (2, 3, 4), (1, None, 6)]
SIZES = {
    1: [(1,), (4,), (9,), (31,), (100,)],
    2: [(1, 1), (4, 3), (10, 10), (13, 17), (31, 64), (100, 9)],
    3: [(1, 2, 3), (5, 5, 5), (9, 4, 13)],
}


def non_finite(shape: tuple[int, ...], dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    """Random values with NaN, +inf and -inf scattered through them (fresh, never zeros)."""
    x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))
    flat = x.view(-1)
    flat[::7], flat[3::11], flat[5::13] = float("nan"), float("inf"), float("-inf")
    return x


def native(family: str, x: torch.Tensor, out_sizes: tuple[int | None, ...]) -> torch.Tensor:
    dims = len(out_sizes)
    sizes = [x.shape[axis - dims] if o is None else o for axis, o in enumerate(out_sizes)]
    return NATIVE[family][dims](x, sizes)


def test_every_window_holds_between_l_over_o_and_two_more_entries() -> None:
    """The dynamic forms read ``ceil(L / o) + 1`` entries from each window's start: no window is longer."""
    for in_size, out_size in itertools.product(range(1, 150), range(1, 45)):
        fewest, most, longest = in_size // out_size, in_size // out_size + 2, -(-in_size // out_size) + 1
        lengths = [end - start for start, end in window_bounds(in_size, out_size)]
        assert fewest <= min(lengths) and max(lengths) <= most <= longest + 1
        assert max(lengths) <= longest, (in_size, out_size)


def test_planning_takes_slices_for_few_long_windows_and_gathers_elsewhere() -> None:
    assert choose_dynamic_form("avg", (64, 64), (6, 6)).kind == "slices"
    assert choose_dynamic_form("avg", (10, 10), (7, 7)).kind == "gathers"
    assert choose_dynamic_form("avg", (1000,), (101,)).kind == "gathers"  # 101 windows
    described = choose_dynamic_form("max", (64, 64), (6, None)).describe()
    assert described == "dynamic window maxima (slices from the runtime bounds) H->6"
    record = fxpool.explain(torch.nn.AdaptiveAvgPool2d(6), torch.randn(1, 2, 64, 64), dynamic=True).records[0]
    assert record.replacement.startswith("dynamic window means (slices") and "dynamic form: window slices" in record.reason


@pytest.mark.parametrize("kind", ["gathers", "slices"])
@pytest.mark.parametrize("out_sizes", OUTPUTS, ids=str)
@pytest.mark.parametrize("family", ["avg", "max"])
def test_the_graph_form_matches_pytorch_with_nan_and_infinities_at_every_size(family: str, out_sizes, kind: str) -> None:
    module = MODULES[family](out_sizes, kind=kind)
    for spatial in SIZES[len(out_sizes)]:
        x = non_finite((2, 3, *spatial), seed=sum(spatial))
        expected = native(family, x, out_sizes)
        torch.testing.assert_close(module.traced_form(x), expected, rtol=1e-12, atol=1e-12, equal_nan=True)
        torch.testing.assert_close(module(x), expected, rtol=0, atol=0, equal_nan=True)  # eager: PyTorch's kernel


@pytest.mark.parametrize("out_sizes", OUTPUTS, ids=str)
def test_the_average_graph_form_has_pytorchs_gradient(out_sizes) -> None:
    module = DynamicAdaptiveAvgPool(out_sizes)
    for spatial in SIZES[len(out_sizes)]:
        x = torch.randn(2, 3, *spatial, dtype=torch.float64)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected = native("avg", theirs, out_sizes)
        upstream = torch.randn_like(expected)
        module.traced_form(ours).backward(upstream)
        expected.backward(upstream)
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)


def _assert_max_exact(module: DynamicAdaptiveMaxPool, x: torch.Tensor, out_sizes) -> None:
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = native("max", theirs, out_sizes)
    pooled = module.traced_form(ours)
    torch.testing.assert_close(pooled, expected, rtol=0, atol=0)
    upstream = torch.randint(-5, 6, expected.shape, generator=torch.Generator().manual_seed(1)).double()
    pooled.backward(upstream)
    expected.backward(upstream)
    assert torch.equal(ours.grad, theirs.grad), (tuple(x.shape), out_sizes)


@pytest.mark.parametrize("out_sizes", OUTPUTS, ids=str)
def test_the_max_graph_form_sends_tie_gradients_where_pytorch_does(out_sizes) -> None:
    module = DynamicAdaptiveMaxPool(out_sizes)
    for spatial in SIZES[len(out_sizes)]:
        # {0, 1} values tie in most windows; an all--inf channel makes windows with no finite maximum
        x = torch.randint(0, 2, (2, 3, *spatial), generator=torch.Generator().manual_seed(sum(spatial))).double()
        x[1, 0] = float("-inf")
        _assert_max_exact(module, x, out_sizes)


def test_the_max_graph_form_exhaustive_small_2d() -> None:
    for in_h, in_w, out_h, out_w in itertools.product(range(1, 7), range(1, 7), (1, 2, 3, 5, 8), (1, 2, 4, 7)):
        x = torch.randint(0, 3, (1, 2, in_h, in_w), generator=torch.Generator().manual_seed(in_h + 7 * in_w)).double()
        _assert_max_exact(DynamicAdaptiveMaxPool((out_h, out_w)), x, (out_h, out_w))


def test_the_onnx_max_graph_is_one_flagged_block_per_axis_never_empty(tmp_path) -> None:
    """10 -> 7 per axis: every window's ``ceil(L/7) + 1`` entries from its start gathered as one block (on the second
    axis, a block of each of the first axis's three reductions) and reduced; flagged once: the flag reaching the
    maximum through Max as its second operand (OpenVINO's Max keeps NaN only from that one), not IsNaN; a Where only
    for windows of -inf alone (OpenVINO's ReduceMax gives the lowest float there). No gathered block is empty at any
    size (OpenVINO compiles an empty Gather at a static size into SIGFPE)."""
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    path = str(tmp_path / "max.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = {"x": {2: "h", 3: "w"}}
        torch.onnx.export(
            DynamicAdaptiveMaxPool((7, 7)), (torch.randn(1, 8, 10, 10),), path, dynamo=False, input_names=["x"], dynamic_axes=axes
        )
    model = onnx.load(path)
    nodes = model.graph.node
    ops = [node.op_type for node in nodes]
    counts = [ops.count(op) for op in ("LeakyRelu", "ReduceMax", "ReduceSum", "ReduceMin", "Max", "Where", "IsNaN", "Abs")]
    # one lift of the entries; per axis the block's ReduceMax, and its lifted ReduceSum and ReduceMin (of the first
    # axis's sums and minima on the second); the flag and the -inf of windows of -inf alone once, at the end
    assert counts == [1, 2, 2, 2, 1, 1, 0, 0], counts
    subtracted = {node.output[0] for node in nodes if node.op_type == "Sub"}
    assert all(node.input[1] in subtracted for node in nodes if node.op_type == "Max")
    floats = {v.name for v in onnx.shape_inference.infer_shapes(model).graph.value_info if v.type.tensor_type.elem_type == 1}
    gathered = [node.output[0] for node in nodes if node.op_type == "Gather" and node.output[0] in floats]
    assert len(gathered) == 4  # the entries on the first axis; the maxima, sums and minima on the second
    model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in gathered)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for size in (10, 13, 4, 7, 20):
        x = non_finite((1, 8, size, size), torch.float32, seed=size)
        pooled, *blocks = session.run(None, {"x": x.numpy()})
        assert all(block.size for block in blocks), size
        torch.testing.assert_close(torch.from_numpy(pooled), MAX[2](x, 7), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("kind", ["gathers", "slices"])
def test_the_onnx_max_form_flags_nan_itself(monkeypatch, kind: str) -> None:
    """Under ONNX export the maximum is an amax beside a NaN flag (onnxruntime's ReduceMax skips NaN)."""
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    module = DynamicAdaptiveMaxPool((7, 5), kind=kind)
    for spatial in SIZES[2]:
        x = non_finite((2, 3, *spatial), torch.float32, seed=sum(spatial))
        torch.testing.assert_close(module.traced_form(x), MAX[2](x, (7, 5)), rtol=0, atol=0, equal_nan=True)


def test_torch_jit_trace_of_a_dynamic_conversion_is_exact_at_other_sizes() -> None:
    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d((6, 6)), torch.nn.AdaptiveMaxPool2d((5, 3)))
    converted = fxpool.convert(model, torch.randn(1, 2, 64, 64), dynamic=True)  # slices for the first (few long windows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(converted, (torch.randn(1, 2, 64, 64),))
    for spatial in [(60, 80), (6, 7), (97, 13)]:
        x = non_finite((2, 2, *spatial), torch.float32, seed=spatial[0])
        torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_torch_jit_trace_of_long_windows_is_exact_where_they_shrink_to_one_entry(family: str) -> None:
    """1000 -> 101 reads each window's entries for two groups of windows in turn (9 and more at the size traced);
    run at sizes down to fewer entries than windows, no group is empty (splitting the entries instead left the
    second half empty there: PyTorch's amax refused it, and OpenVINO's compiler died on it at a static size)."""
    model = MODULES[family]((101,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(
            fxpool.convert(torch.nn.Sequential(model), torch.randn(1, 2, 1000), dynamic=True), (torch.randn(1, 2, 1000),)
        )
    for length in (1300, 300, 150, 101, 50, 7):
        x = non_finite((2, 2, length), torch.float32, seed=length)
        torch.testing.assert_close(traced(x), native(family, x, (101,)), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", ["avg-gathers", "avg-slices", "max-gathers", "max-slices", "avg-1d", "max-3d"])
def test_one_exported_graph_is_exact_at_sizes_it_never_saw(case: str, dynamo: bool, tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    from fxpool.verifying import run_onnxruntime

    family, kind = case.split("-")
    out_sizes, example, others = {
        "1d": ((101,), (1000,), [(777,), (50,), (3000,)]),
        "3d": ((2, 3, 4), (5, 6, 7), [(9, 4, 13), (2, 3, 4), (1, 1, 1)]),
    }.get(kind, ((6, 5), (64, 40), [(60, 80), (5, 4), (97, 33)]))
    module = MODULES[family](out_sizes, kind="slices" if kind == "slices" else "gathers")
    x = torch.randn(2, 3, *example)
    axes = range(2, x.dim())
    path = str(tmp_path / "dyn.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            shapes = ({a: torch.export.Dim(f"s{a}", min=1, max=4096) for a in axes},)
            torch.onnx.export(module, (x,), path, dynamo=True, dynamic_shapes=shapes, verbose=False)
        else:
            torch.onnx.export(module, (x,), path, dynamo=False, input_names=["x"], dynamic_axes={"x": {a: f"s{a}" for a in axes}})
    for spatial in others:
        y = non_finite((2, 3, *spatial), torch.float32, seed=spatial[0])
        (out,) = run_onnxruntime(path, (y,))
        torch.testing.assert_close(torch.from_numpy(out), native(family, y, out_sizes), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("family", ["avg", "max"])
def test_torch_export_takes_named_dims_with_bounds(family: str, strict: bool) -> None:
    """The dynamic form adds no guard of its own: Dims down to 1 (a window of 0 or 1 entries) are accepted."""
    module = MODULES[family]((5, 7))
    x = torch.randn(2, 3, 12, 13)
    batch, height, width = (torch.export.Dim(n, min=1, max=64) for n in ("batch", "height", "width"))
    program = torch.export.export(module, (x,), dynamic_shapes=({0: batch, 2: height, 3: width},), strict=strict)
    assert sorted((int(r.lower), int(r.upper)) for r in program.range_constraints.values()) == [(1, 64)] * 3
    for shape in [(1, 3, 1, 1), (3, 3, 2, 64), (2, 3, 9, 5), (1, 3, 64, 13)]:
        y = non_finite(shape, torch.float32, seed=shape[2])
        torch.testing.assert_close(program.module()(y), native(family, y, (5, 7)), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.skipif(sys.platform != "linux", reason="the meter reads the resident set from /proc")
@pytest.mark.parametrize(
    ("shape", "dynamo"),
    [((1, 2048, 13, 13), False), ((1, 512, 33, 33), True)],
    ids=["13->6 over 2048 channels, TorchScript", "33->6, dynamo"],
)
def test_a_large_zero_padded_block_is_summed_in_halves_in_onnxruntime(shape, dynamo: bool, tmp_path) -> None:
    """A zero-padded block of 2 MiB or more (both blocks here, at the size traced) is gathered for two groups of
    windows in turn, also at the dynamo exporter's symbolic sizes: each graph held 4.2-4.3x input plus output in
    onnxruntime reading it at once, 2.9-3.0x in halves (the meter of ``make bench``)."""
    from model_zoo_checks.dynamic_benchmarks import FloorGraph, export_graph, onnxruntime_peaks

    x = torch.randn(shape)
    module = fxpool.convert(torch.nn.AdaptiveAvgPool2d(6), x, dynamic=True)
    paths = {"pool": str(tmp_path / "pool.onnx"), "floor": str(tmp_path / "floor.onnx")}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        export_graph(module, x, paths["pool"], dynamic_spatial=True, dynamo=dynamo)
        export_graph(FloorGraph(2), x, paths["floor"], dynamic_spatial=False)
    peak = onnxruntime_peaks(paths, shape)["ort_pool_over_in_out"]
    assert peak < 3.5, peak


@pytest.mark.parametrize("family", ["avg", "max"])
def test_a_million_long_axis_costs_memory_linear_in_it(family: str) -> None:
    """The (o x L) masks of an earlier form made 997 x 10**6 booleans here (125x the input); the window
    forms hold the input's spatial-first copy and half of the gathered windows at a time (2.0x the input
    beside it, measured; 4.1x and 3.0x before the halves)."""
    x = torch.randn(1, 2, 1_000_000)
    module = MODULES[family]((997,))
    with torch.no_grad(), PeakBytes() as meter:
        pooled = module.traced_form(x)
    torch.testing.assert_close(pooled, native(family, x, (997,)), rtol=1e-5, atol=1e-6)
    assert meter.peak <= 2.1 * x.untyped_storage().nbytes(), meter.peak / x.untyped_storage().nbytes()


# (family, input shape, output): the benchmark's pool cases (model_zoo_checks.benchmarks.SHAPES) with fewer
# channels, and a bound a little above their peak over input plus output as measured (2.1-3.6; the forms
# before these held 3.1-5.4, and max pools read as two blocks of about half 2.5-3.0 on 3d and 1d). Sums of
# short windows read one zero-padded block, (o x (ceil(L/o) + 1)) entries: 3.1-3.6 up to 4 MiB of block, where
# it is up to 1.5x faster than reading the window's first entries and the two past them (2.7-3.1), and 2.5 above
# it, read for two groups of windows. The goal, 2, is not reached: the spatial-first copy alone is the
# input's size.
PEAK_CASES = [
    ("avg", (2, 64, 10, 10), (7, 7), 3.35),
    ("avg", (32, 512, 10, 10), (7, 7), 2.6),
    ("avg", (1, 64, 64, 64), (6, 6), 2.7),
    ("avg", (2, 64, 4, 5), (6, 6), 3.3),
    ("avg", (2, 16, 5, 10, 10), (3, 7, 7), 3.7),
    ("avg", (2, 64, 1000), (101,), 2.5),
    ("max", (2, 64, 10, 10), (7, 7), 2.85),
    ("max", (2, 16, 9, 10, 11), (4, 3, 7), 2.7),
    ("max", (2, 64, 4, 8), (6, 16), 2.95),
    ("max", (2, 64, 1000), (101,), 2.25),
]


@pytest.mark.parametrize(("family", "shape", "out_sizes", "bound"), PEAK_CASES, ids=str)
def test_peak_memory_of_the_graph_form_stays_within_its_measured_bound(family: str, shape, out_sizes, bound: float) -> None:
    """The input plus the most bytes the graph form holds at once, over input plus output, as the
    benchmark's ``peak / (in + out)`` column reads it, at the case's size and 1.3x it per axis."""
    module = MODULES[family](out_sizes)
    dims = len(out_sizes)
    for scale in (1.0, 1.3):
        x = torch.randn(*shape[:-dims], *(round(s * scale) for s in shape[-dims:]))
        with torch.no_grad(), PeakBytes() as meter:
            pooled = module.traced_form(x)
        size_in, size_out = x.untyped_storage().nbytes(), pooled.untyped_storage().nbytes()
        ratio = (size_in + meter.peak) / (size_in + size_out)
        assert ratio <= bound, (shape, scale, ratio)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_a_million_long_axis_exports_in_seconds_with_both_exporters(family: str, tmp_path) -> None:
    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool1d(997) if family == "avg" else torch.nn.AdaptiveMaxPool1d(997))
    x = torch.randn(1, 2, 1_000_000)
    for dynamo, dynamic in itertools.product((False, True), (False, True)):
        start = time.perf_counter()
        options = {"dynamo": dynamo, "verify": False}
        if dynamic:
            options |= {"dynamic_shapes": ({2: torch.export.Dim.DYNAMIC},)} if dynamo else {"dynamic_axes": {"x": {2: "L"}}}
            options |= {} if dynamo else {"input_names": ["x"]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fxpool.export(model, x, str(tmp_path / f"long-{dynamo}-{dynamic}.onnx"), dynamic=dynamic, **options)
        # the goal is 10 s on a quiet machine; this allows a loaded CI runner three times that
        assert time.perf_counter() - start < 30, (dynamo, dynamic, time.perf_counter() - start)
    assert (tmp_path / "long-False-True.onnx").stat().st_size < 1 << 20  # no (o x L) mask in the graph


def test_convert_with_dynamic_replaces_size_dependent_max_pools_and_keeps_channels_last() -> None:
    converted = fxpool.convert(torch.nn.AdaptiveMaxPool2d((7, 5)), torch.randn(1, 3, 10, 10), dynamic=True)
    record = fxpool.explain(torch.nn.AdaptiveMaxPool2d((7, 5)), torch.randn(1, 3, 10, 10), dynamic=True).records[0]
    assert record.converted and record.size_agnostic and record.replacement.startswith("dynamic window maxima")
    x = torch.randn(2, 4, 13, 17).contiguous(memory_format=torch.channels_last)
    for pooled in (converted(x), converted.traced_form(x)):
        assert pooled.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(pooled, F.adaptive_max_pool2d(x, (7, 5)), rtol=0, atol=0)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_dynamic_pools_trace_again_with_torch_fx(family: str) -> None:
    module = MODULES[family]((7, 5))
    traced = torch.fx.symbolic_trace(module)
    assert "check_input" in traced.code  # a leaf: its size checks stay out of the graph
    for spatial in [(10, 10), (13, 11), (3, 40)]:
        x = torch.randn(1, 2, *spatial)
        torch.testing.assert_close(traced(x), native(family, x, (7, 5)), rtol=1e-6, atol=1e-6)


def test_a_dynamic_module_refuses_an_unknown_form() -> None:
    with pytest.raises(ValueError, match="kind"):
        DynamicAdaptiveAvgPool((3,), kind="matmul")  # type: ignore[arg-type]


def sparse_non_finite(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Random values with a few NaN, +inf and -inf (about one entry in 12 non-finite), so that long windows
    hold none, one kind, or several."""
    return with_non_finite(shape, seed, every=36, dtype=dtype)


@pytest.mark.parametrize("grouped", [False, True], ids=["one-block", "grouped"])
@pytest.mark.parametrize("family", ["avg", "max"])
def test_the_graph_form_is_exact_on_every_short_axis_with_nan_and_infinities(family: str, grouped: bool, monkeypatch) -> None:
    """Every length to 60 and output to 13: windows of 0 to 60 sure entries (split in halves from 4), one
    or two more, outputs longer than the input; sums of short windows as one zero-padded block, and (as
    large blocks are) for two groups of windows."""
    if grouped:
        monkeypatch.setattr(dynamic_module, "GROUPED_BLOCK_BYTES", 0)
    for length, out_size in itertools.product(range(1, 61), range(1, 14)):
        x = sparse_non_finite((1, 3, length), seed=length * 31 + out_size)
        module = MODULES[family]((out_size,))
        expected = native(family, x, (out_size,))
        torch.testing.assert_close(module.traced_form(x), expected, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("example", [10, 40, -10], ids=["whole-blocks", "halves", "grouped"])
@pytest.mark.parametrize("family", ["avg", "max"])
def test_one_exported_graph_is_exact_on_every_short_axis(family: str, example: int, dynamo: bool, tmp_path, monkeypatch) -> None:
    """A graph traced where the sure entries make one block (10 -> 3; averages: one zero-padded block) or
    two halves (40 -> 3), or where the zero-padded block is read for two groups of windows (as large blocks
    are), run in onnxruntime at every length to 50, with NaN and infinities."""
    pytest.importorskip("onnxruntime")
    from fxpool.verifying import run_onnxruntime

    if example < 0:
        monkeypatch.setattr(dynamic_module, "GROUPED_BLOCK_BYTES", 0)
        example = -example

    module = MODULES[family]((3,))
    x = torch.randn(2, 3, example)
    path = str(tmp_path / "dyn.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            shapes = ({2: torch.export.Dim("L", min=1, max=4096)},)
            torch.onnx.export(module, (x,), path, dynamo=True, dynamic_shapes=shapes, verbose=False)
        else:
            torch.onnx.export(module, (x,), path, dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "L"}})
    for length in range(1, 51):
        y = sparse_non_finite((2, 3, length), seed=length, dtype=torch.float32)
        (out,) = run_onnxruntime(path, (y,))
        torch.testing.assert_close(torch.from_numpy(out), native(family, y, (3,)), rtol=1e-5, atol=1e-5, equal_nan=True)


def _through_float32(numerator: torch.Tensor, divisor: int) -> torch.Tensor:
    """``numerator // divisor`` as the dynamo exporter lowers ``torch.div(..., rounding_mode="trunc")`` of int64
    tensors: in float32 (Cast, Div, Floor, Cast)."""
    return torch.floor(numerator.to(torch.float32) / divisor).to(torch.int64)


@settings(max_examples=300, deadline=None)
@given(length=st.integers(1, 10**9), out_size=st.integers(1, 4095))
def test_window_bounds_are_exact_through_a_float32_division_below_4096_outputs(length: int, out_size: int) -> None:
    """The bounds are ``i * (L // o) + floor(i * (L % o) / o)``: every vector divided stays below ``o * (o + 1)``, so
    even a division through float32 gives PyTorch's windows, and no product leaves int32 (OpenVINO's CPU plugin
    computes int64 shape arithmetic in int32)."""
    divided: list[torch.Tensor] = []

    def division(numerator, divisor):
        if isinstance(numerator, torch.Tensor) and numerator.dim():
            divided.append(numerator)
            return _through_float32(numerator, divisor)
        return numerator // divisor

    with mock.patch.object(dynamic_module, "_div", division):
        starts, ends = dynamic_module.runtime_window_bounds(length, out_size, torch.device("cpu"))
    assert list(zip(starts.tolist(), ends.tolist())) == list(window_bounds(length, out_size))
    assert max(int(vector.max()) for vector in divided) < min(out_size * (out_size + 1), 2**31)


# Each length run has a window bound i * L / o that float32 division misplaces (i * L past 2**24): 1,000,000 -> 997
# misplaces 58 (22 starts, 36 ends). Window slices take their bounds from the same runtime_window_bounds (a case of
# theirs, 16 windows of 1,048,576 entries, took 30 s here).
PAST_FLOAT32_LENGTHS = (16_827, 1_000_000)


@pytest.mark.parametrize("route", ["torchscript", "dynamo", "program"])
@pytest.mark.parametrize("family", ["avg", "max"])
def test_window_bounds_stay_exact_integers_where_i_times_l_passes_2_to_the_24(family: str, route: str, tmp_path) -> None:
    """Window bounds are integer divisions of the runtime length. The dynamo exporter lowers
    ``torch.div(..., rounding_mode="trunc")`` of int64 tensors through float32 (Cast, Div, Floor, Cast): its graphs
    averaged shifted windows at 1,000,000 -> 997 and max pools gathered out of bounds there, directly and as
    ``torch.onnx.export`` of a ``torch.export`` program (``program``, which holds PyTorch's divisions)."""
    pytest.importorskip("onnxruntime")
    from fxpool.verifying import run_onnxruntime

    module = MODULES[family]((997,))
    x = torch.randn(1, 1, 2000)
    path = str(tmp_path / "long.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if route == "torchscript":
            torch.onnx.export(module, (x,), path, dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "L"}})
        else:
            shapes = ({2: torch.export.Dim.DYNAMIC},)
            program = torch.export.export(module, (x,), dynamic_shapes=shapes) if route == "program" else module
            torch.onnx.export(program, (x,), path, dynamo=True, dynamic_shapes=shapes, verbose=False)
    for length in PAST_FLOAT32_LENGTHS:
        y = integers_showing_shifted_windows(family, length)
        (out,) = run_onnxruntime(path, (y,))
        torch.testing.assert_close(torch.from_numpy(out), native(family, y, (997,)), rtol=1e-6, atol=0)
