"""fxpool's exported graphs on a second runtime: OpenVINO reads ONNX (optional; skipped when absent).

Install with ``pip install -e '.[crosscheck]'``. Tolerance: rtol=atol=1e-5 against PyTorch (float32,
one 1x1 convolution before the average pool; OpenVINO asked for float32 inference), max pooling
alone bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from inputs import integers_showing_shifted_windows, with_masked_windows, with_non_finite
from torch import nn

import fxpool

openvino = pytest.importorskip("openvino")

CASES = {  # name: (family, input spatial, output): one per replacement kind
    "uniform 7->3": ("avg", (7, 7), (3, 3)),
    "mean 9->1": ("avg", (9, 9), (1, 1)),
    "upsample 4x5->16x20": ("avg", (4, 5), (16, 20)),
    "sliding 10->7": ("avg", (10, 10), (7, 7)),
    "slices 64->6": ("avg", (64, 64), (6, 6)),
    "mixed 13x17->5x7": ("avg", (13, 17), (5, 7)),
    "max gathered 10->7": ("max", (10, 10), (7, 7)),
    "max uniform 14->7": ("max", (14, 14), (7, 7)),
}


def run_openvino(path: str, x: torch.Tensor) -> torch.Tensor:
    # OpenVINO's CPU plugin computes in bfloat16 by default where the CPU supports it; ask for float32.
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return torch.from_numpy(compiled([x.numpy()])[compiled.output(0)])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", list(CASES))
def test_openvino_computes_what_pytorch_computes(case: str, dynamo: bool, tmp_path) -> None:
    family, in_sizes, out_sizes = CASES[case]
    pool = nn.AdaptiveAvgPool2d(out_sizes) if family == "avg" else nn.AdaptiveMaxPool2d(out_sizes)
    # Max pooling alone (nothing else may round) must be bit-equal; average after a convolution.
    model = nn.Sequential(pool) if family == "max" else nn.Sequential(nn.Conv2d(3, 4, 1), pool).eval()
    x = torch.randn(2, 3, *in_sizes)
    path = str(tmp_path / "m.onnx")
    fxpool.export(model, x, path, dynamo=dynamo)
    with torch.no_grad():
        expected = model(x)
    tolerance = 0.0 if family == "max" else 1e-5
    torch.testing.assert_close(run_openvino(path, x), expected, rtol=tolerance, atol=tolerance)


def test_openvino_runs_a_converted_torchvision_model(tmp_path) -> None:
    from fxpool.loading import build_torchvision

    torch.manual_seed(0)
    model = build_torchvision("alexnet")  # 160x160: 4x4 -> 6x6, which the stock TorchScript exporter rejects
    x = torch.randn(1, 3, 160, 160)
    path = str(tmp_path / "alexnet.onnx")
    fxpool.export(model, x, path, dynamo=True)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(run_openvino(path, x), expected, rtol=1e-4, atol=1e-4)


MAX_CASES = {  # uneven windows: fxpool writes the maximum itself (uniform ones are MaxPool or ReduceMax, see limitations)
    "10->7": (nn.AdaptiveMaxPool2d((7, 7)), (10, 10), [(13, 11), (20, 20), (7, 7)]),
    "4->7 (upsampling)": (nn.AdaptiveMaxPool2d((7, 7)), (4, 5), [(5, 4), (9, 9)]),
    "1d 1000->101": (nn.AdaptiveMaxPool1d(101), (1000,), [(777,), (1500,)]),
    "1d 2000->19 (one gather, ReduceMax)": (nn.AdaptiveMaxPool1d(19), (2000,), [(1900,)]),
    "3d 9x10x11->3x4x5": (nn.AdaptiveMaxPool3d((3, 4, 5)), (9, 10, 11), [(12, 13, 15), (3, 4, 5)]),
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", list(MAX_CASES))
def test_openvino_keeps_nan_and_inf_in_max_windows(case: str, dynamo: bool, dynamic: bool, tmp_path) -> None:
    """OpenVINO's Max keeps NaN only from its second operand and its ReduceMax skips it; fxpool's max graphs
    carry NaN by a flag (a sum of non-negative entries, then Sub), so OpenVINO gives NaN, +inf and -inf where PyTorch does."""
    pool, in_sizes, other_sizes = MAX_CASES[case]
    x = torch.randn(2, 3, *in_sizes)  # verified in onnxruntime: a finite example
    path = str(tmp_path / "max.onnx")
    axes = {"x": {2 + axis: f"size{axis}" for axis in range(len(in_sizes))}} if dynamic else None
    fxpool.export(pool, x, path, dynamo=dynamo, dynamic=dynamic, input_names=["x"], dynamic_axes=axes)
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for size in [in_sizes] + (other_sizes if dynamic else []):
        y = with_non_finite((2, 3, *size), seed=sum(size), every=9)
        ours, theirs = torch.from_numpy(compiled([y.numpy()])[0]), pool(y)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{case} at {size}: {m}")


FLAGGED_MAX_CASES = {  # the max forms reduced by a flagged ReduceMax: (output, size, sizes run), dynamic=True or static
    "10->7": ((7, 7), (10, 10), [(13, 11)], [True]),
    "slices 64->6": ((6, 6), (64, 64), [(45, 45)], [False, True]),
    "1d 2000->19 (one block)": ((19,), (2000,), [(1500,)], [False, True]),
    "3d 9x10x11->4x3x7": ((4, 3, 7), (9, 10, 11), [(12, 13, 15)], [True]),
}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(
    ("case", "dynamic"), [(case, dynamic) for case, (*_, modes) in FLAGGED_MAX_CASES.items() for dynamic in modes]
)
def test_openvino_gives_minus_inf_for_windows_of_minus_inf_alone(case: str, dynamic: bool, dynamo: bool, tmp_path) -> None:
    """OpenVINO's ReduceMax starts from the lowest finite float, so it gave -3.4e38 for a window holding -inf alone
    (masked entries filled with -inf, a padded sequence's tail). The flagged maximum gives -inf there, and keeps the
    lowest float itself (``torch.finfo(float32).min``, a common mask value) where a window holds it, alone or with -inf."""
    out_sizes, in_sizes, other_sizes, _ = FLAGGED_MAX_CASES[case]
    pool = getattr(nn, f"AdaptiveMaxPool{len(out_sizes)}d")(out_sizes)
    path = str(tmp_path / "max.onnx")
    axes = {"x": {2 + axis: f"size{axis}" for axis in range(len(in_sizes))}} if dynamic else None
    fxpool.export(pool, torch.randn(1, 4, *in_sizes), path, dynamo=dynamo, dynamic=dynamic, input_names=["x"], dynamic_axes=axes)
    compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for size in [in_sizes] + (other_sizes if dynamic else []):
        y = with_masked_windows((1, 4, *size), seed=len(size))
        ours, theirs = torch.from_numpy(compiled([y.numpy()])[0]), pool(y)
        assert (theirs[0, 0] == float("-inf")).all() and (theirs[0, 1] == torch.finfo(y.dtype).min).all()
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{case} at {size}: {m}")


_COMPILE_AT_STATIC_SIZES = """
import sys, openvino, torch
core = openvino.Core()
family, path, out_size, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(size) for size in sys.argv[4:]]
pool = torch.nn.functional.adaptive_max_pool1d if family == "max" else torch.nn.functional.adaptive_avg_pool1d
for size in sizes:
    model = core.read_model(path)
    model.reshape([1, 2, size])
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = torch.randn(1, 2, size)
    torch.testing.assert_close(torch.from_numpy(compiled([x.numpy()])[0]), pool(x, out_size), rtol=1e-5, atol=1e-6)
"""


@pytest.mark.parametrize("family", ["avg", "max"])
@pytest.mark.parametrize(("length", "out_size"), [(10, 7), (1000, 101)], ids=["10->7", "1000->101"])
def test_openvino_compiles_a_dynamic_graph_reshaped_to_static_sizes(family: str, length: int, out_size: int, tmp_path) -> None:
    """``model.reshape`` to a static size folds the window arithmetic to constants: a Gather of no entries
    there kills the process with SIGFPE (the max block at the size traced, the average's ``L // o`` entries
    below ``o``, a half of those entries where fewer than two remain). Run in a child process."""
    import subprocess
    import sys

    path = str(tmp_path / "pool.onnx")
    pool = nn.AdaptiveMaxPool1d(out_size) if family == "max" else nn.AdaptiveAvgPool1d(out_size)
    fxpool.export(
        pool, torch.randn(1, 2, length), path, dynamo=False, dynamic=True, input_names=["x"], dynamic_axes={"x": {2: "L"}}
    )
    sizes = [str(size) for size in (length, length + 3, 2 * length, out_size, 4, 1, 3 * out_size // 2)]
    run = subprocess.run(
        [sys.executable, "-c", _COMPILE_AT_STATIC_SIZES, family, path, str(out_size), *sizes], capture_output=True, text=True
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])


@pytest.mark.parametrize(("family", "dynamo"), [("avg", False), ("max", True)], ids=["avg-torchscript", "max-dynamo"])
def test_openvino_places_dynamic_windows_exactly_where_i_times_l_passes_2_to_the_31(family: str, dynamo: bool, tmp_path) -> None:
    """OpenVINO's CPU plugin computes int64 shape arithmetic in int32: window bounds as ``i * L // o`` overflowed
    at 3,000,000 -> 997 (averages off by 7.4, maxima by 1.3e6, with both exporters). They are
    ``i * (L // o) + i * (L % o) // o`` now, no product past ``o * (o + 1)``."""
    pool = nn.AdaptiveAvgPool1d(997) if family == "avg" else nn.AdaptiveMaxPool1d(997)
    x = torch.randn(1, 1, 2000)
    path = str(tmp_path / "long.onnx")
    options = {"dynamic_shapes": ({2: torch.export.Dim.DYNAMIC},)} if dynamo else {"dynamic_axes": {"x": {2: "L"}}}
    fxpool.export(nn.Sequential(pool), x, path, dynamic=True, dynamo=dynamo, input_names=["x"], verify=False, **options)
    y = integers_showing_shifted_windows(family, 3_000_000)
    torch.testing.assert_close(run_openvino(path, y), pool(y), rtol=1e-6, atol=0)
