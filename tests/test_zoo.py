"""A representative slice of the zoo sweep on CPU; the full sweep is `make zoo ZOO_ARGS=--all`."""

from __future__ import annotations

import json

import pytest

from model_zoo_checks import zoo


def test_inspection_finds_module_and_functional_pools_and_skips_models_without() -> None:
    assert zoo.has_adaptive_pool("resnet18")  # nn.AdaptiveAvgPool2d
    assert zoo.has_adaptive_pool("densenet121")  # F.adaptive_avg_pool2d in forward
    assert not zoo.has_adaptive_pool("vit_b_16")


@pytest.mark.parametrize("name,size", [("squeezenet1_1", 96), ("densenet121", 64)])
def test_sweep_case_passes_end_to_end(name: str, size: int, tmp_path) -> None:
    case = zoo.check(name, size, str(tmp_path), ["torchscript", "dynamo"])
    assert case.status == "pass", case.reason
    assert case.eager_max_error is not None and case.eager_max_error <= 1e-4
    assert case.torchscript_ort_error is not None and case.dynamo_ort_error is not None
    assert case.ort_ms_converted and case.ort_speedup


def test_reports_are_written(tmp_path) -> None:
    cases = [zoo.Case("alexnet", (1, 3, 160, 160), status="pass", pools=1, ort_speedup=2.0, eager_max_error=0.0),
             zoo.Case("x", (1, 3, 8, 8), status="skip", reason="because")]
    zoo.write_reports(cases, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())[1]["reason"] == "because"
    assert "1 pass, 0 fail, 1 skip" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "speedup.png").stat().st_size > 1000


@pytest.mark.slow
def test_full_sweep_default_set(tmp_path) -> None:
    assert zoo.main(["--report", str(tmp_path)]) == 0
