"""fxpool's conversions on deployment runtimes (model_zoo_checks/runtimes.py), each skipped when absent.

ExecuTorch, LiteRT and Core ML install with ``make runtimes`` (a venv of their own over .venv, which
also runs this file); OpenVINO comes with the ``crosscheck`` extra; TensorRT needs CUDA. A skip names
the line that installs the runtime. Tolerance: 1e-4 of the output's largest magnitude (at least 1), max
pooling alone bit for bit. Core ML is converted only: its prediction needs macOS. ExecuTorch also runs
``dynamic=True`` conversions exported with Dims at sizes the program never saw; a case XNNPACK refuses is
an expected failure with its reason (``runtimes.XNNPACK_REFUSES``) and runs on the portable kernels.
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


# Every dynamic case with XNNPACK, the ones XNNPACK refuses on the portable kernels alone, and some by the
# program route (torch.export with Dims, then fxpool.convert of the program).
DYNAMIC_CASES = [
    *(
        pytest.param(
            name,
            "xnnpack",
            marks=[pytest.mark.xfail(strict=True, reason=runtimes.XNNPACK_REFUSES[name])]
            if name in runtimes.XNNPACK_REFUSES
            else [],
        )
        for name in runtimes.DYNAMIC_MODELS
    ),
    *((name, "portable") for name in runtimes.XNNPACK_REFUSES),
    *((name, "program route") for name in runtimes.PROGRAM_ROUTE),
]


@pytest.mark.parametrize("model,kernels", DYNAMIC_CASES)
def test_a_dynamic_conversion_runs_on_executorch_exactly_at_sizes_it_was_not_exported_at(
    model: str, kernels: str, tmp_path
) -> None:
    """``fxpool.convert(model, x, dynamic=True)``, ``torch.export`` with a bounded Dim per spatial axis (or, by
    the program route, ``fxpool.convert`` of the original's program with them), lowered once
    (``to_edge_transform_and_lower``), run by ExecuTorch's runtime at the example's size and three others."""
    why_not = runtimes.available("executorch")
    if why_not:
        pytest.skip(f"executorch: {why_not}")
    route = "program" if kernels == "program route" else "module"
    row = runtimes.check_dynamic(model, tmp_path / "case.log", xnnpack=kernels != "portable", route=route)
    assert row.lowered.converted, row.lowered.reason
    assert not any("adaptive" in op for op in row.lowered.ops), row.lowered.ops
    sizes = [size for size, _ in row.runs]
    assert len(set(sizes[1:]) - {sizes[0]}) == 3, sizes
    for size, run in row.runs:
        assert run.ran and run.exact, (size, run)


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


def test_an_absent_runtime_names_the_line_that_installs_it(monkeypatch) -> None:
    monkeypatch.setitem(runtimes.RUNTIMES, "executorch", ("no_such_module_fxpool", *runtimes.RUNTIMES["executorch"][1:]))
    why_not = runtimes.available("executorch")
    assert why_not is not None and why_not.endswith('pip install "fxpool[executorch]"'), why_not
    assert set(runtimes.INSTALL) == set(runtimes.RUNTIMES)


def test_a_dynamic_row_is_exact_only_at_every_size() -> None:
    lowered = runtimes.RuntimeRun(
        True, None, ops={"executorch_call_delegate": 2, "index_select": 4}, delegated="2 delegate call(s)"
    )
    good = runtimes.RuntimeRun(True, True, 1e-7, 1e-4)
    failed = runtimes.RuntimeRun(True, False, reason="RuntimeError: no kernel")
    assert runtimes.DynamicRow("executorch", "m", lowered, (((8, 8), good), ((9, 9), good))).exact
    assert not runtimes.DynamicRow("executorch", "m", lowered, (((8, 8), good), ((9, 9), failed))).exact
    assert not runtimes.DynamicRow("executorch", "m", runtimes.RuntimeRun(False, False, reason="E: x")).exact
    table = runtimes.dynamic_markdown(
        [runtimes.DynamicRow("executorch-portable", "m", lowered, (((8, 8), good), ((9, 9), failed)))]
    )
    assert (
        "| m | portable |" in table and "8x8: error 1.0e-07 (exact)" in table and "9x9: fails, `RuntimeError: no kernel`" in table
    )


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
