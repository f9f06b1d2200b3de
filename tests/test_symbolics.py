"""fxpool.symbolics on its own: the exporters' translations of native adaptive average pools.

A model exported without conversion, with the translations registered, must export where the stock
exporters refuse (10->7), lower each step of the plan a converted model would get to the op the
module docstring names, and run in onnxruntime within float32 rounding of PyTorch (rtol = atol =
1e-5); half and bfloat16 within one rounding of the native pool's result (1e-3 / 1e-2).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fxpool.planning import choose_plan
from fxpool.symbolics import dynamo_translation_table, exporter_translations
from fxpool.verifying import op_histogram, run_onnxruntime

_POOLS = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


class Pool(nn.Module):
    def __init__(self, size, dims: int = 2, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.size, self.dims, self.dtype = size, dims, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dtype is None:
            return _POOLS[self.dims](x, self.size)
        # numpy (so onnxruntime's feeds) has no bfloat16: cast inside the graph
        return _POOLS[self.dims](x.to(self.dtype), self.size).float()


def _export(model: nn.Module, x: torch.Tensor, path: str, dynamo: bool) -> None:
    if dynamo:
        torch.onnx.export(model, (x,), path, dynamo=True, custom_translation_table=dynamo_translation_table())
    else:
        with exporter_translations():
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("size,op", [(7, "Gather"), (5, "AveragePool"), (1, "GlobalAveragePool")])
def test_native_pools_lower_to_the_named_op_and_run_exactly(size: int, op: str, dynamo: bool, tmp_path) -> None:
    model, x = Pool(size).eval(), torch.randn(1, 3, 10, 10)
    path = str(tmp_path / "p.onnx")
    _export(model, x, path, dynamo)
    ops = op_histogram(path)
    assert op in ops and not {"GatherND", "Where", "Loop", "If"} & set(ops), ops
    (out,) = run_onnxruntime(path, (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


def test_the_stock_torchscript_exporter_refuses_what_the_translation_takes(tmp_path) -> None:
    with pytest.raises(Exception, match="factor"):
        torch.onnx.export(Pool(7).eval(), (torch.randn(1, 3, 10, 10),), str(tmp_path / "s.onnx"), dynamo=False)


def test_translations_are_unregistered_afterwards(tmp_path) -> None:
    with exporter_translations():
        pass
    with pytest.raises(Exception, match="factor"):
        torch.onnx.export(Pool(7).eval(), (torch.randn(1, 3, 10, 10),), str(tmp_path / "s.onnx"), dynamo=False)


# (input shape, output size, ops the lowering must contain): one case per kind of plan step
PLAN_CASES = {
    "sliding": ((2, 3, 10, 10), 7, {"AveragePool", "Concat", "Gather"}),
    "slices": ((1, 2, 33, 33), 6, {"Slice", "ReduceMean", "Concat"}),
    "uniform": ((1, 2, 7, 7), 3, {"AveragePool"}),
    "reduce+sliding": ((1, 2, 10, 10), (1, 7), {"ReduceMean", "AveragePool", "Gather"}),
    "upsample": ((1, 2, 4, 5), (16, 20), {"Gather"}),
    "long axis": ((1, 2, 4, 2100), (2, 200), {"Pad", "Gather", "AveragePool", "Mul"}),
    "keeps H": ((1, 2, 10, 9), (None, 7), {"AveragePool", "Gather"}),
    "unbatched": ((3, 10, 9), (5, 7), {"Unsqueeze", "AveragePool", "Squeeze"}),
}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_each_plan_step_lowers_as_planned_and_runs_exactly(case: str, dynamo: bool, tmp_path) -> None:
    shape, size, expected_ops = PLAN_CASES[case]
    model, x = Pool(size).eval(), torch.randn(shape)
    path = str(tmp_path / "p.onnx")
    _export(model, x, path, dynamo)
    ops = op_histogram(path)
    assert expected_ops <= set(ops) and not {"GatherND", "Where", "Loop", "If"} & set(ops), ops
    (out,) = run_onnxruntime(path, (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


# ReduceMean takes its axes as an input from opset 18, Pad its pads and Slice its bounds from 11 (10),
# (Un)squeeze their axes from 13
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("case", ["reduce+sliding", "slices", "long axis", "unbatched"])
def test_the_torchscript_lowering_is_spelled_for_the_opset(case: str, opset: int, tmp_path) -> None:
    shape, size, expected_ops = PLAN_CASES[case]
    model, x = Pool(size).eval(), torch.randn(shape)
    path = str(tmp_path / "p.onnx")
    with exporter_translations():
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=opset)
    assert expected_ops <= set(op_histogram(path))
    (out,) = run_onnxruntime(path, (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


def test_the_cases_cover_every_plan_step_kind() -> None:
    kinds = set()
    for shape, size, _ in PLAN_CASES.values():
        sizes = (size,) * 2 if isinstance(size, int) else size
        in_sizes = shape[-2:]
        plan = choose_plan("avg", in_sizes, tuple(i if o is None else o for i, o in zip(in_sizes, sizes)))
        kinds |= {type(step).__name__ for step in plan.steps}
    assert kinds == {
        "SlidingWindowStep",
        "WindowSlicesStep",
        "PoolStep",
        "ReduceStep",
        "UpsampleStep",
        "WindowGatherStep",
        "WindowScaleStep",
    }


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(
    "dims,shape,size",
    [
        (1, (2, 3, 10), 7),
        (1, (2, 3, 12), 4),
        (3, (1, 2, 5, 6, 7), (3, 4, 5)),
        (3, (2, 3, 6, 8, 10), (3, 4, 5)),
        (3, (3, 6, 9, 4), (2, 3, 2)),
    ],
)
def test_1d_and_3d_pools(dims: int, shape: tuple[int, ...], size, dynamo: bool, tmp_path) -> None:
    """Exact; AveragePools 2d (onnxruntime's from opset 19 walks 1d and 3d windows slowly), unbatched too."""
    import onnx

    model, x = Pool(size, dims).eval(), torch.randn(shape)
    path = str(tmp_path / "p.onnx")
    _export(model, x, path, dynamo)
    kernels = {
        len(a.ints)
        for n in onnx.load(path).graph.node
        if n.op_type == "AveragePool"
        for a in n.attribute
        if a.name == "kernel_shape"
    }
    assert kernels <= {2}, kernels
    (out,) = run_onnxruntime(path, (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("dtype,tolerance", [(torch.float16, 1e-3), (torch.bfloat16, 1e-2)], ids=["float16", "bfloat16"])
def test_low_precision_is_computed_in_float32_and_rounded_once(
    dtype: torch.dtype, tolerance: float, dynamo: bool, tmp_path
) -> None:
    model, x = Pool(7, dtype=dtype).eval(), torch.randn(2, 3, 33, 33) * 10
    path = str(tmp_path / "p.onnx")
    _export(model, x, path, dynamo)
    ops = op_histogram(path)
    assert ops.get("Cast", 0) >= 2, ops  # in to float32, and back
    (out,) = run_onnxruntime(path, (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_float64_stays_float64(dynamo: bool, tmp_path) -> None:
    model, x = Pool(7).eval(), torch.randn(1, 2, 10, 10, dtype=torch.float64)
    path = str(tmp_path / "p.onnx")
    _export(model, x, path, dynamo)
    (out,) = run_onnxruntime(path, (x,))
    assert out.dtype.name == "float64"
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-12, atol=1e-12)
