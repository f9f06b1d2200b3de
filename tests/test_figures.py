"""The results figures (model_zoo_checks/figures.py) and the lines under them (tables.py): drawn from the
reports, the committed ones from the committed data, and nothing drawn where a report has nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from model_zoo_checks import tables

figures = pytest.importorskip("model_zoo_checks.figures", reason="matplotlib is not installed (the test and zoo extras)")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"


def texts(svg: str) -> list[str]:
    """The text of a matplotlib SVG: each text element is written as a comment before its glyphs."""
    return re.findall(r"<!-- (.*?) -->", svg)


def case(name: str, **times: float) -> dict[str, object]:
    return {"case": name, "family": "avg", "device": "cpu", "dtype": "float32", **times}


def test_the_committed_figures_are_drawn_from_the_committed_data(tmp_path: Path) -> None:
    # make figures draws them; a report kept in docs/data without drawing them again fails here
    written = figures.write_figures("bench", json.loads((DATA / "bench.json").read_text()), tmp_path, "bench", ["svg"])
    written += figures.write_figures("runtimes", json.loads((DATA / "runtimes.json").read_text()), tmp_path, "runtimes", ["svg"])
    assert sorted(p.name for p in written) == ["bench-convert.svg", "bench-dynamic.svg", "bench-pools.svg", "runtimes.svg"]
    for path in written:
        committed = ROOT / "docs" / "figures" / path.name
        assert texts(path.read_text()) == texts(committed.read_text()), f"{committed} is not drawn from docs/data (make figures)"


def test_a_figure_is_drawn_the_same_twice(tmp_path: Path) -> None:
    results = json.loads((DATA / "runtimes.json").read_text())
    first = figures.write_figures("runtimes", results, tmp_path / "a", "runtimes", ["svg"])[0].read_bytes()
    second = figures.write_figures("runtimes", results, tmp_path / "b", "runtimes", ["svg"])[0].read_bytes()
    assert first == second


def test_the_pools_figure_draws_what_the_report_has_and_no_more(tmp_path: Path) -> None:
    full = case("10→7", t1_ort_fxpool=1e-3, t1_ort_fxpool_dynamic=4e-3, t1_ort_floor=1e-4, t1_openvino_native=2e-3)
    full |= {"t2_ort_fxpool": 1e-3, "t2_openvino_native": 2e-3, "ort_dynamo_original": 5e-3}
    no_openvino = case("no OpenVINO", t1_ort_fxpool=1e-3)  # a run without openvino installed
    results = {"torch": "2.9", "threads": 2, "date": "2026-12-06", "pools": {"cases": [full, no_openvino]}, "aoti": {"new": 1}}
    written = figures.write_figures("bench", results, tmp_path, "bench", ["svg", "png"])
    assert [p.name for p in written] == ["bench-pools.svg", "bench-pools.png"]  # no convert section: no figure
    shown = texts(written[0].read_text())
    assert "10→7" in shown and "no OpenVINO" not in shown
    assert "1 thread" in shown and "2 threads" in shown
    assert "the stock dynamo exporter's graph" in shown and "the read-once floor" in shown
    assert "0.50" in shown  # fxpool's graph over OpenVINO's op, labelled on its bar
    assert any("make bench of 6 December 2026, torch 2.9, the CPU, 1 and 2 threads" in t for t in shown)  # the panels'
    without_dynamic = {"threads": 1, "pools": {"cases": [case("a", t1_ort_fxpool=1e-3, t1_openvino_native=2e-3)]}}
    shown = texts(figures.write_figures("bench", without_dynamic, tmp_path / "b", "bench", ["svg"])[0].read_text())
    assert "fxpool's graph, dynamic=True" not in shown and "the stock dynamo exporter's graph" not in shown


def test_the_dynamic_figure_and_its_caption_count_the_goals_from_the_rows(tmp_path: Path) -> None:
    def row(size: str, over_static: float, over_openvino: float) -> dict:
        times = {"t1_dynamic": 1e-3, "t1_static": 1e-3 / over_static, "t1_openvino_dynamic": 1e-3 / over_openvino}
        peaks = {"peak_over_in_out": 2.5, "ort_peak_over_in_out": 1.5 * over_static, "ort_dynamo_peak_over_in_out": 3.0}
        return {"case": "14→7", "size": size, "output": [7, 7], **peaks, **times}

    rows = [row("19x19", 1.2, 0.5), row("14x14", 6.0, 1.25), row("10x10", 1.6, 0.4)]  # 14 tiles by 7, 10 does not
    results = {"torch": "2.9", "threads": 2, "date": "2026-12-07", "dynamic": rows}
    written = figures.write_figures("bench", results, tmp_path, "bench", ["svg"])
    assert [p.name for p in written] == ["bench-dynamic.svg"]
    shown = texts(written[0].read_text())
    assert "14→7" in shown and any("the issue's goal" in t for t in shown)
    caption = tables.dynamic_caption(results)
    assert "at most 1.0 in 2 of 3" in caption and "at most 1.5 in 1 of 3" in caption
    assert "1 of the other 2 are sizes whose windows tile every axis" in caption
    assert "Peak memory over input plus output: 2.5x in eager (0 of 3 at most 2); 1.8–9.0x for TorchScript's graph in " in caption
    assert "onnxruntime (1 at most 2); 3.0x for dynamo's graph in onnxruntime (0 at most 2)." in caption


def test_nothing_to_draw_draws_nothing(tmp_path: Path) -> None:
    assert figures.write_figures("bench", {"torch": "x"}, tmp_path, "bench") == []
    assert figures.write_figures("bench", {"pools": {"cases": []}, "convert": []}, tmp_path, "bench") == []
    assert figures.write_figures("runtimes", {"rows": []}, tmp_path, "runtimes") == []
    assert (
        figures.write_figures("gpu", {"pools": {"cases": [case("cpu only", fwd_fxpool=1.0, fwd_native=1.0)]}}, tmp_path, "g") == []
    )


def test_the_gpu_figure_shows_each_dtype(tmp_path: Path) -> None:
    rows = [
        case("10→7", device="cuda", dtype=dtype, fwd_fxpool=1.0, fwd_native=2.0, fwdbwd_fxpool=3.0, fwdbwd_native=2.0)
        for dtype in ("float32", "float16", "bfloat16")
    ]
    results = {"torch": "2.9", "device_name": "NVIDIA H100", "pools": {"cases": rows}}
    shown = texts(figures.write_figures("gpu", results, tmp_path, "bench_pools", ["svg"])[0].read_text())
    assert {"float32", "float16", "bfloat16", "forward", "forward+backward", "10→7"} <= set(shown)
    assert any("make gpu-checks, torch 2.9, NVIDIA H100" in t for t in shown)


def test_runtime_outcomes_and_the_runtimes_figure(tmp_path: Path) -> None:
    exact = {"converted": True, "ran": True, "max_error": 0.0, "bound": 1e-4}
    assert tables.outcome(exact) == "exact"
    assert tables.outcome(exact | {"max_error": 1.0}) == "off"
    assert tables.outcome({"converted": True, "ran": None}) == "not run"
    assert tables.outcome({"converted": False, "ran": False}) == tables.outcome({"converted": True, "ran": False}) == "fails"
    rows = [{"runtime": "litert", "model": "max 9 to 1", "original": {"converted": False, "ran": False}, "fxpool": exact}]
    shown = texts(figures.write_figures("runtimes", {"torch": "2.9", "rows": rows}, tmp_path, "runtimes", ["svg"])[0].read_text())
    assert {"LiteRT", "max 9 to 1", "original", "fxpool", "runs, exact", "does not convert or run"} <= set(shown)
    assert "runs, not exact" not in shown  # the legend names only what the figure shows


def test_the_lines_under_the_figures_come_from_the_data() -> None:
    bench = json.loads((DATA / "bench.json").read_text())
    pools = tables.pools_caption(bench)
    assert len(pools.splitlines()) == 3
    assert f"{len(bench['pools']['cases'])} pools exported to ONNX" in pools and "at 1 and 2 threads" in pools
    assert re.search(r"fxpool's graph: \d\.\d+–\d\.\d+x OpenVINO's time, faster in \d+ of \d+ runs", pools)
    convert = tables.convert_caption(bench)
    assert f"on {len(bench['convert'])} models" in convert and len(convert.splitlines()) == 3
    runtimes = tables.runtimes_caption(json.loads((DATA / "runtimes.json").read_text()))
    assert "fxpool's conversion runs exactly in" in runtimes and "(Core ML: prediction needs macOS)" in runtimes
    assert tables.pools_caption({}) == tables.convert_caption({}) == tables.runtimes_caption({}) == ""


def test_a_run_is_named_by_its_command_date_and_device() -> None:
    cpu = {"torch": "2.9", "date": "2026-12-06", "threads": 2, "cpu": "AMD EPYC, 2 cores", "device_name": "cpu"}
    assert (
        tables.measured_by(cpu, "make bench") == "make bench of 6 December 2026, torch 2.9, the CPU (AMD EPYC, 2 cores), 2 threads"
    )
    assert (
        tables.measured_by({"torch": "2.9", "device_name": "NVIDIA H100"}, "make gpu-checks")
        == "make gpu-checks, torch 2.9, NVIDIA H100"
    )
    line = tables.bench_markdown(cpu, ["run"])
    assert line.startswith("Measured on 6 December 2026 with torch 2.9 on the CPU (AMD EPYC, 2 cores), 2 threads")


def test_a_page_asks_for_benchmark_sections_by_name() -> None:
    results = json.loads((DATA / "bench.json").read_text())
    convert = tables.bench_markdown(results, ["convert"])
    assert convert.startswith("| model |") and "## " not in convert  # the page's own heading stands in
    runtime = tables.bench_markdown(results, ["runtime"])
    assert runtime.startswith("### 1 thread\n") and "### 2 threads\n" in runtime
    assert tables.bench_markdown(results, ["aoti"]) == ""  # a section this run did not measure
    with pytest.raises(ValueError, match="unknown benchmark sections"):
        tables.bench_markdown(results, ["speed"])
