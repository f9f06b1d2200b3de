#!/usr/bin/env bash
# Every GPU check in one call, for a machine with CUDA (about 5 minutes on one GPU):
# the cuda-marked tests, the eager GPU benchmark in three dtypes, a zoo slice on the GPU and, where
# the tensorrt package is installed, the TensorRT rows of the runtimes table.
# Results: reports/bench_cuda.json and reports/zoo-cuda/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
"$PY" -m pytest -q -p no:cacheprovider -m cuda tests
"$PY" -m model_zoo_checks.benchmarks --device cuda --sections pools --repeats 50 --out reports/bench_cuda.json
"$PY" -m model_zoo_checks.zoo --device cuda --models alexnet vgg11 resnet18 efficientnet_b0 pspnet_resnet18 \
    vgg11_max_pool r3d_18 --sizes 160 320 --report reports/zoo-cuda
# TensorRT through ONNX, where the tensorrt package is installed (pip install tensorrt; not on the CPU machines)
if "$PY" -c "import tensorrt" 2>/dev/null; then
    "$PY" -m model_zoo_checks.runtimes --runtimes tensorrt --report reports/runtimes-tensorrt
else
    echo "tensorrt is not installed: the TensorRT row is left out"
fi
