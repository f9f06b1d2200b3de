"""fxpool's exported graphs on a second runtime: OpenVINO reads ONNX (optional; skipped when absent).

Install with ``pip install -e '.[crosscheck]'``. Tolerance: rtol=atol=1e-5 against PyTorch (float32,
one 1x1 convolution before the average pool; OpenVINO asked for float32 inference), max pooling
alone bit for bit.
"""

from __future__ import annotations

import pytest
import torch
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
