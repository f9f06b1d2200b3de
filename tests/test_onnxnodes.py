"""ONNX nodes written directly (``fxpool.onnxnodes``): what the dynamo exporter writes for them, exact in onnxruntime
at sizes the export never saw, and no guard for ``torch.export`` (a named Dim down to 1 passes)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.export import Dim

from fxpool.dynamic import runtime_window_bounds
from fxpool.onnxnodes import onnx_shape, window_slices
from fxpool.windows import window_bounds

onnxruntime = pytest.importorskip("onnxruntime")


class WindowSums(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        starts, ends = runtime_window_bounds(x.shape[2], 5, x.device)
        return torch.stack([window.sum(2) for window in window_slices(x, 2, starts, ends)], 2)


class ShapeOf(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return onnx_shape(x) * 1


def export(module: nn.Module, x: torch.Tensor, path: str) -> onnxruntime.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), path, dynamo=True, dynamic_shapes=({2: Dim("length", min=1, max=999)},))
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


def test_window_slices_are_slices_to_runtime_bounds(tmp_path) -> None:
    session = export(WindowSums(), torch.randn(2, 3, 12), str(tmp_path / "slices.onnx"))
    for length in (12, 1, 5, 7, 13, 100):
        x = torch.randn(2, 3, length)
        expected = torch.stack([x[:, :, start:end].sum(2) for start, end in window_bounds(length, 5)], 2)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-6, atol=1e-6)


def test_onnx_shape_is_the_runtime_shape(tmp_path) -> None:
    session = export(ShapeOf(), torch.randn(2, 3, 12), str(tmp_path / "shape.onnx"))
    (got,) = session.run(None, {session.get_inputs()[0].name: torch.randn(2, 3, 41).numpy()})
    assert got.tolist() == [2, 3, 41]
