"""The window forms ONNX export runs (``PoolPlan.onnx_steps``): window maxima by gathers and elementwise
Max; window sums by one gather per axis (a zero appended where windows are shorter) and a sum over
each window (Einsum under the dynamo exporter, ReduceSum under TorchScript), divided by the window sizes.

Max values are compared bit for bit with PyTorch's adaptive max pools, means within float rounding
(relative 1e-6, absolute 1e-6 in float32), and both have NaN and ±inf exactly where PyTorch has them,
with NaN and ±inf placed at random positions; in eager (``ExactAdaptivePool.onnx_form``) over
exhaustive small sizes, and in onnxruntime. The max gradient stays PyTorch's under ``torch.export``,
which keeps the gather + MaxPool form (ties included).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from inputs import with_masked_windows

import fxpool
from fxpool.forms import window_counts, window_gather_indices, window_position_indices
from fxpool.planning import BLOCK_MIN_LENGTHS, WINDOW_SUMS_MIN_COPIES, choose_plan, last_axis_copies
from fxpool.replacements import ExactAdaptivePool
from fxpool.steps import BlockReduceStep, SpatialLayoutStep, WindowCountStep, WindowReduceStep, WindowSlicesStep, WindowZeroStep
from fxpool.windows import window_bounds

NATIVE = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
NATIVE_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
GRID_2D = list(itertools.product((1, 2, 5, 7, 10, 13), repeat=2))  # in sizes
OUT_2D = list(itertools.product((1, 2, 3, 4, 6, 9), repeat=2))


def with_specials(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random values with NaN, +inf and -inf at random positions (about one in six entries each kind)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    kind = torch.randint(0, 18, shape, generator=generator)
    x[kind == 0] = float("nan")
    x[kind == 1] = float("inf")
    x[kind == 2] = float("-inf")
    return x.to(dtype)


def assert_max_equal(ours: torch.Tensor | np.ndarray, theirs: torch.Tensor, where: object) -> None:
    """Same shape, NaN exactly where PyTorch has NaN, every other value bit-equal (-inf is not the lowest float)."""
    ours = torch.as_tensor(ours)
    assert ours.shape == theirs.shape, where
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True, msg=lambda message: f"{where}: {message}")


def assert_mean_close(ours: torch.Tensor | np.ndarray, theirs: torch.Tensor, where: object) -> None:
    """Same shape, NaN and ±inf exactly where PyTorch has them, finite values within float rounding."""
    ours = torch.as_tensor(ours)
    assert ours.shape == theirs.shape, where
    assert torch.equal(ours.isnan(), theirs.isnan()), where
    infinite = theirs.isinf()
    assert torch.equal(ours.isinf(), infinite) and torch.equal(ours[infinite], theirs[infinite]), where
    tolerance = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(theirs.dtype, 1e-6)
    finite = theirs.isfinite()
    torch.testing.assert_close(ours[finite], theirs[finite], rtol=tolerance, atol=tolerance, msg=str(where))


def module_for(in_sizes: tuple[int, ...], out_sizes: tuple[int, ...], family: str = "max") -> ExactAdaptivePool:
    return ExactAdaptivePool(choose_plan(family, in_sizes, out_sizes), "test")  # type: ignore[arg-type]


# --- the plan ---


def test_only_plans_with_a_general_axis_get_an_onnx_form() -> None:
    assert choose_plan("max", (10, 10), (7, 7)).onnx_steps
    assert choose_plan("avg", (10, 10), (7, 7)).onnx_steps
    assert not choose_plan("avg", (64, 64), (6, 6)).onnx_steps  # a large plane: the sliced windows of its steps
    assert not choose_plan("avg", (14, 14), (7, 7)).onnx_steps  # one AvgPool already: blocks of 2 entries
    assert not choose_plan("max", (14, 14), (7, 7)).onnx_steps  # one MaxPool already
    assert not choose_plan("max", (9, 9), (1, 1)).onnx_steps  # one amax
    plan = choose_plan("max", (33, 60, 5), (6, 6, 5))  # few long windows (60->6: 10 each) are sliced
    assert plan.onnx_steps == (
        SpatialLayoutStep(True),
        WindowReduceStep("max", 0, 33, 6, 6),
        WindowSlicesStep(1, 60, 6),
        SpatialLayoutStep(False),
    )  # the identity axis has none
    assert (
        plan.describe_onnx() == "spatial axes first -> window-max D 33->6 (6 gathers, Max) -> slices H 60->6 -> spatial axes back"
    )
    upsampled = choose_plan("max", (4, 8), (6, 16))
    assert [type(step).__name__ for step in upsampled.onnx_steps] == [
        "SpatialLayoutStep",
        "WindowReduceStep",
        "SpatialLayoutStep",
        "UpsampleStep",
    ]


def test_block_form_where_the_windows_tile_every_pooled_axis_and_the_last_axis_blocks_are_long() -> None:
    plan = choose_plan("avg", (64, 64), (2, 2))
    assert plan.onnx_steps == (
        BlockReduceStep("avg", 0, 64, 2),
        BlockReduceStep("avg", 1, 64, 2),
        WindowCountStep(((64, 2), (64, 2))),
    )
    assert plan.describe_onnx() == "block-sum H 64->2 (k=32) -> block-sum W 64->2 (k=32) -> divide by window sizes"
    assert choose_plan("max", (5, 96, 96), (5, 6, 6)).onnx_steps == (
        BlockReduceStep("max", 1, 96, 6),
        BlockReduceStep("max", 2, 96, 6),
    )  # the identity axis has none, the max family no division
    assert choose_plan("avg", (64, 64), (1, 2)).onnx_steps[0] == BlockReduceStep("avg", 0, 64, 1)  # an axis pooled whole
    for (dims, family), length in BLOCK_MIN_LENGTHS.items():
        assert choose_plan(family, (5,) * (dims - 1) + (4 * length,), (5,) * (dims - 1) + (4,)).onnx_steps
        if length > 2:  # shorter blocks: the pool of the steps
            assert not choose_plan(family, (5,) * (dims - 1) + (4 * (length - 1),), (5,) * (dims - 1) + (4,)).onnx_steps
    assert not choose_plan("avg", (64, 14), (2, 7)).onnx_steps  # short blocks on the last axis
    assert not choose_plan("avg", (16, 16), (2, 2)).onnx_steps  # 8 entries: the pool is faster on small planes
    assert not choose_plan("avg", (64, 64), (3, 3)).onnx_steps  # 22-entry windows every 21: overlapping
    assert not choose_plan("avg", (64, 64), (1, 1)).onnx_steps  # one mean already


@pytest.mark.parametrize("family", ["avg", "max"])
def test_block_form_against_pytorch_with_nan_and_inf(family: str) -> None:
    native = NATIVE_AVG if family == "avg" else NATIVE
    check = assert_mean_close if family == "avg" else assert_max_equal
    for in_sizes, out_sizes in [((32,), (2,)), ((24, 96), (3, 6)), ((32, 16), (2, 1)), ((16, 16, 16), (2, 2, 1))]:
        module = module_for(in_sizes, out_sizes, family)
        assert isinstance(module.plan.onnx_steps[0], BlockReduceStep), module.plan
        for seed, dtype in enumerate((torch.float32, torch.float64, torch.float16, torch.bfloat16)):
            x = with_specials((2, 3, *in_sizes), seed=seed, dtype=dtype)
            if family == "avg" and dtype in (torch.float16, torch.bfloat16):
                check(module.onnx_form(x), native[len(in_sizes)](x.double(), out_sizes).to(dtype), (in_sizes, dtype))
            else:
                check(module.onnx_form(x), native[len(in_sizes)](x, out_sizes), (in_sizes, dtype))


def test_block_form_unbatched_and_channels_last() -> None:
    unbatched = ExactAdaptivePool(choose_plan("avg", (64, 64), (2, 2)), "test", batched=False)
    x = with_specials((3, 64, 64), seed=5)
    assert_mean_close(unbatched.onnx_form(x), NATIVE_AVG[2](x, (2, 2)), "unbatched")
    x = with_specials((2, 3, 64, 32), seed=6).contiguous(memory_format=torch.channels_last)
    ours = module_for((64, 32), (4, 2), "avg").onnx_form(x)
    assert_mean_close(ours, NATIVE_AVG[2](x, (4, 2)), "channels_last")
    assert ours.is_contiguous(memory_format=torch.channels_last)


def test_max_window_forms_move_the_spatial_axes_first_on_every_plane() -> None:
    """Small planes (10->7: 1.47 entries copied singly per input entry), large ones (64->6: 0.105) and an upsampled
    last axis alike: with the NaN flag the input's layout lost on every max case of make bench at one thread."""
    for in_sizes, out_sizes in [((10, 10), (7, 7)), ((64, 64), (6, 6)), ((4, 8), (6, 16)), ((1000,), (101,))]:
        steps = choose_plan("max", in_sizes, out_sizes).onnx_steps
        assert SpatialLayoutStep(True) in steps and SpatialLayoutStep(False) in steps, (in_sizes, out_sizes)
        assert steps.index(SpatialLayoutStep(True)) == 0, steps


@pytest.mark.parametrize("in_size", range(1, 13))
def test_window_position_indices_cover_every_window_and_nothing_else(in_size: int) -> None:
    for out_size in range(1, 13):
        bounds = window_bounds(in_size, out_size)
        span = max(end - start for start, end in bounds)
        gathered = torch.stack(window_position_indices(in_size, out_size, span))  # (span, out)
        for i, (start, end) in enumerate(bounds):
            assert set(gathered[:, i].tolist()) == set(range(start, end))


def test_average_window_form_only_where_the_plane_is_small() -> None:
    small = choose_plan("avg", (10, 10), (7, 7))
    assert small.describe_onnx() == (
        "spatial axes first -> zero after H,W -> window-sum H 10->7 (span 3) -> window-sum W 10->7 (span 3)"
        " -> divide by window sizes -> spatial axes back"
    )
    large = choose_plan("avg", (64, 64), (6, 6))  # 12 * 6 * 6 / 4096 = 0.105 copies
    assert last_axis_copies(large.axes) < WINDOW_SUMS_MIN_COPIES <= last_axis_copies(small.axes)
    up = choose_plan("avg", (4, 5), (6, 6))  # up-sampling windows of 1 or 2 entries: a window form too
    assert [type(step).__name__ for step in up.onnx_steps] == [
        "SpatialLayoutStep",
        "WindowZeroStep",
        *["WindowReduceStep"] * 2,
        "WindowCountStep",
        "SpatialLayoutStep",
    ]


def test_only_axes_with_shorter_windows_get_a_zero() -> None:
    even = choose_plan("avg", (33, 33), (6, 6))  # every window 6 long: no zero to gather
    assert not any(isinstance(step, WindowZeroStep) for step in even.onnx_steps)
    mixed = choose_plan("avg", (12, 10), (6, 7))  # H: one AvgPool's windows; W: 2 or 3 long
    assert WindowZeroStep((1,)) in mixed.onnx_steps
    assert WindowCountStep(((12, 6), (10, 7))) in mixed.onnx_steps
    kept = choose_plan("avg", (5, 10), (5, 7), follows_input=(True, False))  # H follows the input: not pooled
    assert WindowCountStep((None, (10, 7))) in kept.onnx_steps


@pytest.mark.parametrize("in_size", range(1, 13))
def test_zero_padded_window_positions_cover_every_window_and_point_past_the_axis_for_the_rest(in_size: int) -> None:
    for out_size in range(1, 13):
        bounds = window_bounds(in_size, out_size)
        span = max(end - start for start, end in bounds)
        positions = window_gather_indices(in_size, out_size, span, zero_padded=True).view(out_size, span)
        for i, (start, end) in enumerate(bounds):
            assert positions[i].tolist() == list(range(start, end)) + [in_size] * (span - (end - start))


def test_window_counts_are_the_products_of_the_window_lengths() -> None:
    counts = window_counts(((10, 7), None, (5, 3)))
    lengths = {size: [end - start for start, end in window_bounds(*size)] for size in ((10, 7), (5, 3))}
    assert counts.shape == (7, 1, 3)
    assert counts[:, 0, :].tolist() == [[a * b for b in lengths[(5, 3)]] for a in lengths[(10, 7)]]


# --- eager, what ONNX export runs ---


@pytest.mark.parametrize("in_size", range(1, 13))
def test_average_exhaustive_1d_with_nan_and_inf(in_size: int) -> None:
    for out_size in range(1, 13):
        x = with_specials((2, 5, in_size), seed=in_size * 100 + out_size)
        module = module_for((in_size,), (out_size,), "avg")
        assert_mean_close(module.onnx_form(x), NATIVE_AVG[1](x, out_size), (in_size, out_size))


@pytest.mark.parametrize("in_sizes", GRID_2D)
def test_average_2d_grid_with_nan_and_inf(in_sizes: tuple[int, int]) -> None:
    for out_sizes in OUT_2D + [(17, 11), (12, 3)]:
        x = with_specials((2, 3, *in_sizes), seed=sum(in_sizes) * 100 + sum(out_sizes))
        ours = module_for(in_sizes, out_sizes, "avg").onnx_form(x)
        assert_mean_close(ours, NATIVE_AVG[2](x, out_sizes), (in_sizes, out_sizes))


@pytest.mark.parametrize("in_sizes", [(5, 10, 10), (9, 10, 11), (3, 8, 2)])
def test_average_3d_with_nan_and_inf(in_sizes: tuple[int, int, int]) -> None:
    for out_sizes in itertools.product((1, 3, 4, 7), repeat=3):
        x = with_specials((2, 3, *in_sizes), seed=sum(out_sizes))
        ours = module_for(in_sizes, out_sizes, "avg").onnx_form(x)
        assert_mean_close(ours, NATIVE_AVG[3](x, out_sizes), (in_sizes, out_sizes))


def test_average_every_dtype_unbatched_and_channels_last() -> None:
    module = module_for((10, 9), (7, 4), "avg")
    assert module.plan.onnx_steps
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        x = with_specials((2, 3, 10, 9), seed=3, dtype=dtype)
        ours = module.onnx_form(x)
        assert ours.dtype == dtype
        assert_mean_close(ours, NATIVE_AVG[2](x, (7, 4)), dtype)
    unbatched = with_specials((3, 10, 9), seed=4)
    assert_mean_close(module.onnx_form(unbatched), NATIVE_AVG[2](unbatched, (7, 4)), "unbatched")
    channels_last = with_specials((2, 3, 10, 9), seed=5).contiguous(memory_format=torch.channels_last)
    ours = module.onnx_form(channels_last)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert_mean_close(ours, NATIVE_AVG[2](channels_last, (7, 4)), "channels_last")
    doubled = module_for((10, 9), (7, 4), "avg").double()  # constants rebuilt after a dtype change
    x = with_specials((1, 2, 10, 9), seed=6, dtype=torch.float64)
    assert_mean_close(doubled.onnx_form(x), NATIVE_AVG[2](x, (7, 4)), "double module")


@pytest.mark.parametrize("in_size", range(1, 13))
def test_exhaustive_1d_with_nan_and_inf(in_size: int) -> None:
    for out_size in range(1, 13):
        x = with_specials((2, 5, in_size), seed=in_size * 100 + out_size)
        module = module_for((in_size,), (out_size,))
        assert_max_equal(module.onnx_form(x), NATIVE[1](x, out_size), (in_size, out_size))


@pytest.mark.parametrize("in_sizes", GRID_2D)
def test_2d_grid_with_nan_and_inf(in_sizes: tuple[int, int]) -> None:
    for out_sizes in OUT_2D:
        x = with_specials((2, 3, *in_sizes), seed=sum(in_sizes) * 100 + sum(out_sizes))
        assert_max_equal(module_for(in_sizes, out_sizes).onnx_form(x), NATIVE[2](x, out_sizes), (in_sizes, out_sizes))


@pytest.mark.parametrize("in_sizes", [(9, 10, 11), (5, 4, 7), (3, 8, 2)])
def test_3d_with_nan_and_inf(in_sizes: tuple[int, int, int]) -> None:
    for out_sizes in itertools.product((1, 3, 4, 6), repeat=3):
        x = with_specials((2, 3, *in_sizes), seed=sum(out_sizes))
        assert_max_equal(module_for(in_sizes, out_sizes).onnx_form(x), NATIVE[3](x, out_sizes), (in_sizes, out_sizes))


def test_every_dtype_unbatched_and_channels_last() -> None:
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        x = with_specials((2, 3, 10, 9), seed=3, dtype=dtype)
        assert_max_equal(module_for((10, 9), (7, 4)).onnx_form(x), NATIVE[2](x, (7, 4)), dtype)
    unbatched = with_specials((3, 10, 9), seed=4)
    assert_max_equal(module_for((10, 9), (7, 4)).onnx_form(unbatched), NATIVE[2](unbatched, (7, 4)), "unbatched")
    channels_last = with_specials((2, 3, 10, 9), seed=5).contiguous(memory_format=torch.channels_last)
    ours = module_for((10, 9), (7, 4)).onnx_form(channels_last)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert_max_equal(ours, NATIVE[2](channels_last, (7, 4)), "channels_last")


def test_the_onnx_form_rebuilds_its_indices_after_a_dtype_change() -> None:
    module = module_for((10, 10), (7, 7)).double()
    x = with_specials((1, 2, 10, 10), seed=6, dtype=torch.float64)
    assert_max_equal(module.onnx_form(x), NATIVE[2](x, (7, 7)), "double")


# --- onnxruntime ---


def _onnxruntime(module: torch.nn.Module, x: torch.Tensor, path, dynamo: bool = False, dynamic: bool = False) -> np.ndarray:
    import onnxruntime

    # the self-check compares with allclose: a finite example (±inf as ±float max would overflow window sums)
    converted = fxpool.convert(module, x.nan_to_num(nan=0.0, posinf=1.0, neginf=-1.0), dynamic=dynamic)
    torch.onnx.export(converted, (x,), path, dynamo=dynamo)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_max_windows_of_minus_inf_alone_give_minus_inf_in_onnxruntime(dynamic: bool, dynamo: bool, tmp_path) -> None:
    """Windows of -inf alone, of the lowest float alone and of both (masks): -inf, the lowest float, the lowest
    float, as PyTorch gives, from every max form (elementwise Max, a flagged ReduceMax per window or per block).
    OpenVINO's side of it is tests/test_crosscheck.py."""
    pytest.importorskip("onnxruntime")
    for in_sizes, out_sizes in [((10, 10), (7, 7)), ((64, 64), (6, 6)), ((2000,), (19,)), ((9, 10, 11), (4, 3, 7))]:
        pool = getattr(torch.nn, f"AdaptiveMaxPool{len(in_sizes)}d")(out_sizes)
        x = with_masked_windows((2, 4, *in_sizes), seed=len(in_sizes))
        ours = _onnxruntime(pool, x, tmp_path / "masked.onnx", dynamo, dynamic)
        assert_max_equal(ours, pool(x), (in_sizes, out_sizes, dynamic))


@pytest.mark.parametrize("in_size", range(1, 13))
def test_exhaustive_1d_in_onnxruntime(in_size: int, tmp_path) -> None:
    for out_size in range(1, 13):
        plan = choose_plan("max", (in_size,), (out_size,))
        if not plan.onnx_steps:
            continue  # a MaxPool or amax (onnxruntime's skip NaN: see docs/limitations.md)
        x = with_specials((2, 3, in_size), seed=in_size * 100 + out_size)
        ours = _onnxruntime(torch.nn.AdaptiveMaxPool1d(out_size), x, tmp_path / "pool.onnx")
        assert_max_equal(ours, NATIVE[1](x, out_size), (in_size, out_size))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_2d_and_3d_in_onnxruntime_export_gathers_and_max_or_few_long_windows_sliced(dynamo: bool, tmp_path) -> None:
    import onnx

    cases = [((10, 10), (7, 7)), ((33, 33), (6, 6)), ((100, 60), (6, 6)), ((64, 64), (6, 6)), ((4, 8), (6, 16))]
    for in_sizes, out_sizes in cases + [((9, 10, 11), (4, 3, 7))]:
        x = with_specials((2, 4, *in_sizes), seed=len(in_sizes))
        pool = (torch.nn.AdaptiveMaxPool2d if len(in_sizes) == 2 else torch.nn.AdaptiveMaxPool3d)(out_sizes)
        ours = _onnxruntime(pool, x, tmp_path / "pool.onnx", dynamo)
        assert_max_equal(ours, NATIVE[len(in_sizes)](x, out_sizes), (in_sizes, out_sizes))
        ops = {node.op_type for node in onnx.load(str(tmp_path / "pool.onnx")).graph.node}
        if in_sizes[0] >= 8 * out_sizes[0]:  # 100->6, 64->6: each window sliced and reduced, with its NaN flag
            assert {"Slice", "ReduceMax", "LeakyRelu", "ReduceMin", "Sub", "Max"} <= ops and "MaxPool" not in ops, ops
        else:
            assert {"Gather", "Max", "Abs", "Sub"} <= ops and not {"MaxPool", "ReduceMax"} & ops, ops


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_long_max_windows_are_one_gather_and_a_reducemax_with_a_nan_flag(dynamo: bool, tmp_path) -> None:
    import onnx

    from fxpool.steps import WINDOW_MAXIMA_MAX_GATHERS

    for in_sizes, out_sizes in [((2000,), (19,)), ((700, 9), (20, 5))]:
        plan = choose_plan("max", in_sizes, out_sizes)
        assert max(s.span for s in plan.onnx_steps if isinstance(s, WindowReduceStep)) > WINDOW_MAXIMA_MAX_GATHERS
        x = with_specials((2, 4, *in_sizes), seed=len(in_sizes))
        pool = (torch.nn.AdaptiveMaxPool1d if len(in_sizes) == 1 else torch.nn.AdaptiveMaxPool2d)(out_sizes)
        ours = _onnxruntime(pool, x, tmp_path / "pool.onnx", dynamo)
        assert_max_equal(ours, NATIVE[len(in_sizes)](x, out_sizes), (in_sizes, out_sizes))
        ops = [node.op_type for node in onnx.load(str(tmp_path / "pool.onnx")).graph.node]
        assert {"ReduceMax", "LeakyRelu", "ReduceMin", "Sub"} <= set(ops) and not {"MaxPool", "IsNaN"} & set(ops), ops
        assert len(ops) < 70, ops


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_block_form_in_onnxruntime_exports_reshapes_and_sums(dynamo: bool, tmp_path) -> None:
    import onnx

    native = {1: torch.nn.AdaptiveAvgPool1d, 2: torch.nn.AdaptiveAvgPool2d, 3: torch.nn.AdaptiveAvgPool3d}
    for in_sizes, out_sizes in [((64, 64), (2, 2)), ((96, 64), (6, 4)), ((16, 32, 32), (2, 2, 2)), ((64,), (4,))]:
        x = with_specials((2, 4, *in_sizes), seed=len(in_sizes))
        ours = _onnxruntime(native[len(in_sizes)](out_sizes), x, tmp_path / "pool.onnx", dynamo)
        assert_mean_close(ours, NATIVE_AVG[len(in_sizes)](x, out_sizes), (in_sizes, out_sizes))
        ops = {node.op_type for node in onnx.load(str(tmp_path / "pool.onnx")).graph.node}
        # Reshapes by constants (no Shape arithmetic), the sums, one Div; no pool, no op a static quantizer requantizes
        assert ops - {"Constant"} == {"Reshape", "Einsum" if dynamo else "ReduceSum", "Div"}, ops
    x = torch.randn(2, 4, 64, 64)
    ours = _onnxruntime(torch.nn.AdaptiveMaxPool2d(2), x, tmp_path / "pool.onnx", dynamo)
    assert_max_equal(ours, NATIVE[2](x, (2, 2)), "max 64->2")  # finite: ReduceMax skips NaN, as MaxPool does
    assert {node.op_type for node in onnx.load(str(tmp_path / "pool.onnx")).graph.node} - {"Constant"} == {"Reshape", "ReduceMax"}


def test_onnxruntime_maxpool_and_reducemax_skip_nan_which_is_why_the_form_uses_max(tmp_path) -> None:
    """The finding the form rests on (onnxruntime's CPU kernels): if this fails, MaxPool may serve again."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    def run(node: onnx.NodeProto, x: np.ndarray) -> np.ndarray:
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]

    x = np.array([[[1.0, np.nan, 3.0, 2.0]]], dtype=np.float32)
    assert not np.isnan(run(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[4], strides=[4]), x)).any()
    assert not np.isnan(run(helper.make_node("ReduceMax", ["x"], ["y"], keepdims=1), x)).any()
    pair = helper.make_node("Max", ["x", "x2"], ["y"])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x2"]), pair],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    session = onnxruntime.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    assert np.isnan(session.run(None, {"x": x})[0][0, 0, 1])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_average_window_form_in_onnxruntime_exports_gathers_and_sums(dynamo: bool, tmp_path) -> None:
    import onnx

    cases = [
        ((10, 10), (7, 7)),
        ((4, 5), (6, 6)),
        ((1000,), (101,)),
        ((5, 10, 10), (3, 7, 7)),
        ((13, 10), (13, 7)),
        ((33, 33), (6, 6)),
    ]
    native = {1: torch.nn.AdaptiveAvgPool1d, 2: torch.nn.AdaptiveAvgPool2d, 3: torch.nn.AdaptiveAvgPool3d}
    for in_sizes, out_sizes in cases:
        assert choose_plan("avg", in_sizes, out_sizes).onnx_steps, (in_sizes, out_sizes)
        for dtype in (torch.float32, torch.float64):
            x = with_specials((2, 4, *in_sizes), seed=len(in_sizes), dtype=dtype)
            ours = _onnxruntime(native[len(in_sizes)](out_sizes).to(dtype), x, tmp_path / "pool.onnx", dynamo)
            assert_mean_close(ours, NATIVE_AVG[len(in_sizes)](x, out_sizes), (in_sizes, out_sizes, dtype))
            ops = {node.op_type for node in onnx.load(str(tmp_path / "pool.onnx")).graph.node}
            assert not {"AveragePool", "MatMul", "Mul", "Add", "Where"} & ops, ops  # no op a static quantizer requantizes
            # the sums: an Einsum under torch.export (opset 18 and up), a ReduceSum under TorchScript
            assert {"Gather", "Einsum" if dynamo else "ReduceSum", "Div", "Transpose"} <= ops, ops
            if in_sizes != (33, 33):  # shorter windows: the zero they gather
                assert ("Pad" if dynamo else "Concat") in ops, ops


@pytest.mark.parametrize("case", ["10->7 (window sums)", "3d 5x10x10->3x7x7"])
def test_static_int8_quantization_leaves_the_window_sums_as_accurate_as_the_pool_in_float(case: str, monkeypatch, tmp_path) -> None:
    """onnxruntime's static QDQ quantizer finds nothing to round in the window sums (dynamo graph): the
    quantized graph's error is the one with the pool's nodes excluded, not the 2x of a form whose
    partial sums it requantizes (the window means with Add and Where gave 2.8e-2 against 1.3e-2)."""
    pytest.importorskip("onnxruntime.quantization")
    from model_zoo_checks import quantization

    monkeypatch.setattr(quantization, "QUANTIZERS", ("static QDQ",))
    (row,) = quantization.case_rows(
        [(name, build(), shape) for name, build, shape in quantization.POOL_CASES if name == case], tmp_path, tmp_path / "log"
    )
    ours, in_float = row["fxpool / static QDQ"], row["fxpool, pool in float / static QDQ"]
    assert ours is not None and ours <= 1.01 * in_float, row


# --- torch.export keeps the gradient-exact form ---


@pytest.mark.parametrize("in_sizes,out_sizes", [((10,), (7,)), ((7, 10), (5, 3)), ((10, 10), (7, 7)), ((5, 4, 7), (3, 3, 4))])
def test_torch_export_keeps_the_gather_form_and_pytorchs_gradient_with_ties(in_sizes, out_sizes) -> None:
    # Values in {0, 1, 2}: most windows hold tied maxima, whose gradient PyTorch sends to the first in
    # row-major order; the gather + MaxPool form does the same, per-axis maxima would not.
    native = {1: torch.nn.AdaptiveMaxPool1d, 2: torch.nn.AdaptiveMaxPool2d, 3: torch.nn.AdaptiveMaxPool3d}[len(in_sizes)]
    pool = native(out_sizes)
    x = torch.randint(0, 3, (2, 3, *in_sizes), generator=torch.Generator().manual_seed(7)).float()
    program = torch.export.export(fxpool.convert(pool, x), (x,))
    targets = {str(node.target) for node in program.graph.nodes}
    assert any("max_pool" in t for t in targets) and not any("maximum" in t or "adaptive" in t for t in targets), targets
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randint(-8, 9, pool(x).shape, generator=torch.Generator().manual_seed(1)).float()
    program.module()(ours).backward(upstream)
    pool(theirs).backward(upstream)
    assert torch.equal(ours.grad, theirs.grad)
