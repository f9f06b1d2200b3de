"""fxpool.symbolics on its own: the exporters' translations of native adaptive average pools.

A model exported without conversion, with the translations registered, must export where the stock
exporters refuse (10->7), lower each window kind to the op the module docstring names, and run in
onnxruntime within 1e-5 of PyTorch.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fxpool.exporting import op_histogram, run_onnxruntime
from fxpool.symbolics import dynamo_translation_table, exporter_translations


class Pool(nn.Module):
    def __init__(self, size) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, self.size)


def _export(model: nn.Module, x: torch.Tensor, path: str, dynamo: bool) -> None:
    if dynamo:
        torch.onnx.export(model, (x,), path, dynamo=True, custom_translation_table=dynamo_translation_table())
    else:
        with exporter_translations():
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("size,op", [(7, "MatMul"), (5, "AveragePool"), (1, "GlobalAveragePool")])
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
