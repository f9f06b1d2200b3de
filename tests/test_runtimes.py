"""fxpool's conversions on deployment runtimes (model_zoo_checks/runtimes.py), each skipped when absent.

ExecuTorch, LiteRT and Core ML install with ``make runtimes`` (a venv of their own over .venv, which
also runs this file); OpenVINO comes with the ``crosscheck`` extra; TensorRT needs CUDA. Tolerance:
1e-4 of the output's largest magnitude (at least 1), max pooling alone bit for bit. Core ML is
converted only: its prediction needs macOS.
"""

from __future__ import annotations

import pytest

from model_zoo_checks import runtimes

# one model per replacement kind, the pyramid, and a real network
MODELS = [
    "sliding 10->7",
    "slices 33->6",
    "uniform 7->3",
    "upsample 4x5->16x20",
    "mean 9->1",
    "max gathered 10->7",
    "max 9->1",
    "psp pyramid 40",
    "alexnet@160",
]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("runtime", list(runtimes.RUNTIMES))
def test_fxpools_conversion_converts_and_runs_exactly(runtime: str, model: str, tmp_path) -> None:
    why_not = runtimes.available(runtime)
    if why_not:
        pytest.skip(f"{runtime}: {why_not}")
    row = runtimes.check(runtime, model, tmp_path / "case.log")
    ours = row.fxpool
    assert ours.converted, ours.reason
    if runtime == "coreml":
        assert ours.ran is None and ours.ops
        return
    assert ours.ran and ours.exact, (ours.max_error, ours.bound)
    # the adaptive pool itself is gone from every program fxpool hands over
    assert not any("adaptive" in op for op in ours.ops), ours.ops
    if runtime == "executorch" and row.original.converted:  # XNNPACK takes at least what it took of the original

        def outside(run: runtimes.RuntimeRun) -> int:
            return sum(run.ops.values()) - run.ops.get("executorch_call_delegate", 0)

        assert outside(ours) <= outside(row.original), (ours.ops, row.original.ops)


def test_a_run_is_exact_only_within_its_bound() -> None:
    assert runtimes.RuntimeRun(True, True, max_error=1e-5, bound=1e-4).exact
    assert runtimes.RuntimeRun(True, True, max_error=1e-3, bound=1e-4).exact is False
    assert runtimes.RuntimeRun(True, None, reason="prediction needs macOS").exact is None
    off = runtimes.Row(
        "r",
        "m",
        runtimes.RuntimeRun(False, False, reason="E: no"),
        runtimes.RuntimeRun(True, True, 1e-3, 1e-4, {"GATHER_ND": 2, "ADD": 1}),
    )
    table = runtimes.markdown([off])
    assert "does not convert: `E: no`" in table and "(OFF)" in table and "3 ops (GATHER_ND x2)" in table
    assert runtimes.markdown([off], by_runtime=True).startswith("### r\n\n| model | original |")


def test_a_refusal_is_told_without_this_machines_paths() -> None:
    error = ValueError("\x1b[31m/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/pooling.py:1554:0: bad\x1b[0m\nmore")
    assert runtimes._first_line(error) == "ValueError: torch/nn/modules/pooling.py:1554:0: bad"


def test_an_absent_runtime_is_said_so() -> None:
    assert runtimes.available("tensorrt") is not None  # no TensorRT on the CPU machines


NNCF_MAX_MISS = pytest.mark.xfail(
    strict=True, reason="NNCF quantizes the inputs of the window maxima's elementwise Max (docs/limitations.md)"
)


@pytest.mark.parametrize(
    "case,quantizer",
    [
        ("10->7 (window sums)", "NNCF"),
        ("3d 5x10x10->3x7x7", "NNCF"),
        pytest.param("max 10->7 (window maxima)", "NNCF", marks=NNCF_MAX_MISS),
        ("10->7 (window sums)", "pt2e XNNPACK"),
        ("3d 5x10x10->3x7x7", "pt2e XNNPACK"),
        ("max 10->7 (window maxima)", "pt2e XNNPACK"),
    ],
)
def test_quantized_conversion_is_as_accurate_as_the_quantized_original(quantizer: str, case: str, tmp_path) -> None:
    """NNCF (OpenVINO) and PyTorch 2 export quantization with the XNNPACK quantizer, run by ExecuTorch."""
    pytest.importorskip("nncf" if quantizer == "NNCF" else "executorch.runtime")
    from model_zoo_checks import quantization

    (row,) = quantization.case_rows(
        [(name, build(), shape) for name, build, shape in quantization.POOL_CASES if name == case], tmp_path, tmp_path / "log"
    )
    assert row[f"fxpool / {quantizer}"] is not None, row
    assert quantization.within_bounds(row, quantizer) is True, row
    if quantizer == "pt2e XNNPACK" and not case.startswith("10->7"):
        # ExecuTorch has no kernel for the original's adaptive max pool or 3d pool; the conversion runs
        assert row[f"original / {quantizer}"] is None, row
