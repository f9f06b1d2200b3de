#!/usr/bin/env bash
# Every GPU check in one call, on a bare GPU machine: its own python3 and torch, no .venv, no network.
# Optional packages travel as wheels in .whl/ (make gpu-wheels, here) and are installed offline.
#
#   make gpu-checks                     # on the GPU machine (the device tool's run, carry [".whl"])
#   DEVICE=cpu REPEATS=2 ZOO_DTYPES=float32 make gpu-checks  # the same plumbing on the CPU, to try the script
#
# Steps (each with its own time limit, 8 minutes in all at most; one failing does not stop the others,
# the exit status says which failed):
# the cuda-marked tests; the pool benchmark in three dtypes, forward and forward+backward; whole
# models in eager, under torch.compile, and as AOTInductor packages; a zoo slice in three dtypes.
# Results: $OUT (the device tool's folder) or reports/gpu/: *.json, *.log and gpu.md (the tables).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
REPEATS=${REPEATS:-50}
ZOO_DTYPES=${ZOO_DTYPES:-float32 float16 bfloat16}
RESULTS=${OUT:-reports/gpu}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/fxpool-site .whl/*.whl && export PYTHONPATH="/tmp/fxpool-site:$PYTHONPATH"
fi
status=0
step() {  # step NAME SECONDS COMMAND...: run it under a time limit, its output in $RESULTS/NAME.log
    local name=$1 limit=$2 started=$SECONDS
    shift 2
    if timeout "$limit" "$@" > "$RESULTS/$name.log" 2>&1; then
        echo "ok     $name ($((SECONDS - started)) s)"
    else
        echo "FAILED $name (exit $?, $((SECONDS - started)) s); its last lines:"
        tail -n 25 "$RESULTS/$name.log"
        status=1
    fi
}
step environment 60 "$PY" -c "import torch, sys; print(sys.version); print(torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
if [ "$DEVICE" = cuda ]; then
    step cuda-tests 150 "$PY" -m pytest -q -p no:cacheprovider -n 4 -m cuda tests
else  # the CPU rehearsal: the device tests skip their CUDA half
    step cuda-tests 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_devices.py
fi
step bench-pools 90 "$PY" -m model_zoo_checks.benchmarks --device "$DEVICE" --sections pools --repeats "$REPEATS" --skip-onnx \
    --out "$RESULTS/bench_pools.json"
step bench-models 150 "$PY" -m model_zoo_checks.benchmarks --device "$DEVICE" --dtypes float32 bfloat16 \
    --sections models compile aoti --repeats "$((REPEATS < 20 ? REPEATS : 20))" --out "$RESULTS/bench_models.json"
# shellcheck disable=SC2086  # ZOO_DTYPES is a list of words
step zoo 90 "$PY" -m model_zoo_checks.zoo --device "$DEVICE" --dtypes $ZOO_DTYPES --exporters dynamo \
    --models alexnet vgg11 resnet18 efficientnet_b0 pspnet_resnet18 vgg11_max_pool smp/PSPNet-resnet34 --sizes 160 \
    --report "$RESULTS/zoo"
"$PY" -m model_zoo_checks.tables gpu "$RESULTS" > "$RESULTS/gpu.md" || status=1
echo "results in $RESULTS/ (gpu.md: the tables for docs/gpu.md)"
exit $status
