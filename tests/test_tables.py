"""The docs' result tables (model_zoo_checks/tables.py): counts and verdicts come from the reports."""

from __future__ import annotations

import json

import pytest

from model_zoo_checks import tables


def _case(model: str, size: int, status: str = "pass", **fields: object) -> dict[str, object]:
    return {"model": model, "input_shape": [1, 3, size, size], "status": status, **fields}


def test_zoo_table_counts_statuses_pools_and_exports(tmp_path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "report.json").write_text(
        json.dumps(
            [
                _case(
                    "vgg11", 160, pools=1, replacements={"kron-matmul": 1}, stock_torchscript="fails: x", converted_torchscript="ok"
                ),
                _case("alexnet", 160, "fail", pools=2, unconverted=1, details="a long traceback"),
            ]
        )
    )
    # a later shard's report of the same case wins
    later = [_case("alexnet", 160, pools=2, replacements={"matmul": 2}), _case("x", 9, "skip")]
    (second / "report.json").write_text(json.dumps(later))
    out = tmp_path / "kept.json"
    assert tables.keep([first, second], out) == 3
    kept = json.loads(out.read_text())
    assert all("details" not in case for case in kept)
    text = tables.render("zoo", out)
    assert "3 cases of 3 models: **2 pass, 0 fail, 1 skip**" in text
    assert "Pools found: 3, converted: 3 (matmul 2, kron-matmul 1)" in text
    assert "| TorchScript, stock | 0/1 | 0 | 1 |" in text and "| TorchScript, converted | 1/1 | 0 | 0 |" in text


def test_quantization_tables_say_no_where_the_bound_is_missed_and_dash_where_a_quantizer_is_absent(tmp_path) -> None:
    row = {"case": "10->7", "original / dynamic": 1e-2, "fxpool / dynamic": 1.2e-2}
    text = tables.bench_markdown({"torch": "x", "threads": 2, "repeats": 3, "quantization": [row]})
    dynamic = text.split("### dynamic")[1].split("###")[0]
    assert "| 10->7 | 1.0e-02 | 1.2e-02 | - | NO |" in dynamic  # 1.2e-2 > 1.1 x 1.0e-2
    nncf = text.split("### NNCF")[1].split("###")[0]
    assert "| 10->7 | - | - | - | - |" in nncf


def test_runtime_tables_give_ratios_per_thread_count_and_dash_where_a_form_is_missing() -> None:
    row = {"case": "max 10->7", "family": "max", "dtype": "float32", "fwd_fxpool": 1.0, "fwd_native": 1.0}
    row |= {"fwdbwd_fxpool": 1.0, "fwdbwd_native": 1.0, "input_MB": 1.6}
    row |= {"t1_ort_fxpool": 2e-3, "t1_openvino_native": 4e-3, "t1_ort_floor": 1e-4, "t1_ort_fxpool_steps": 8e-3}
    row |= {"t1_ort_fxpool_dynamic": 1e-2, "t1_eager_fxpool": 3e-3, "t1_eager_floor": 1e-3, "t1_eager_fxpool_dynamic": 6e-3}
    uniform = {k: v for k, v in row.items() if k != "t1_ort_fxpool_steps"} | {"case": "max 14->7"}
    text = tables.bench_markdown({"torch": "x", "threads": 2, "repeats": 3, "pools": {"cases": [row, uniform]}})
    assert "read-once floor, 1 thread\n" in text and "read-once floor, 2 threads" not in text
    assert "| max 10->7 | 2.00 | 0.50 | 20.0 | 2.00 | 0.20 |" in text  # onnxruntime
    assert "| max 10->7 | 1.6 | 2.50 | 0.75 | 3.0 | 1.50 |" in text  # dynamic=True and eager
    assert "| max 14->7 | 2.00 | 0.50 | 20.0 | - | 0.20 |" in text
    assert max(line.count("|") - 1 for line in text.splitlines() if line.startswith("|")) <= 6  # the page's width


def test_render_refuses_a_missing_report(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tables.render("zoo", tmp_path / "nothing.json")


def test_average_forms_table_gives_each_form_and_the_picks_ratio_to_the_best() -> None:
    row = {"shape": [8, 512, 10, 10], "output": [7, 7], "picked": "window", "best": "window"}
    row |= {"ort_sliding": 2.5e-3, "ort_slices": 3.9e-3, "ort_gather": 4e-3, "ort_window": 1.25e-3, "ort_window_dynamo": 1.3e-3}
    slow = row | {"shape": [1, 512, 64, 64], "output": [6, 6], "picked": "slices", "best": "sliding", "ort_window": None}
    text = tables.bench_markdown({"torch": "x", "threads": 1, "repeats": 3, "avgforms": [row, slow]})
    assert "| 8x512x10x10 → 7x7 | 2.50 | 3.90 | 4.00 | **1.25** | 1.30 | 1.00 |" in text  # bold: the pick
    assert "| 1x512x64x64 → 6x6 | 2.50 | **3.90** | 4.00 | - | 1.30 | 1.56 |" in text


def test_a_report_merged_from_runs_of_several_days_names_each_sections_day() -> None:
    results = {"torch": "x", "threads": 2, "repeats": 7, "date": "2026-12-07", "dates": {"pools": "2026-12-07"}}
    results["dates"] |= {"convert": "2026-12-06", "avgforms": "2026-12-06"}
    assert tables.bench_markdown(results, ["run"]).startswith(
        "Measured on 7 December 2026 (avgforms and convert on 6 December 2026)"
    )
    assert "make bench of 6 December 2026" in tables.measured_by(results, "make bench", "convert")
    assert "make bench of 7 December 2026" in tables.measured_by(results, "make bench", "pools")
    assert "make bench of 7 December 2026" in tables.measured_by(results, "make bench")
