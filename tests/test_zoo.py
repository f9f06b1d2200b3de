"""A representative slice of the zoo sweep on CPU; the full sweep is `make zoo ZOO_ARGS=--all`."""

from __future__ import annotations

import json

import pytest
import torch

from model_zoo_checks import catalog, zoo


@pytest.mark.parametrize("name,expected", [
    ("resnet18", True),  # nn.AdaptiveAvgPool2d
    ("densenet121", True),  # F.adaptive_avg_pool2d in forward
    ("mobilenet_v2", True),  # F.adaptive_avg_pool2d in _forward_impl, not in forward
    ("regnet_x_400mf", True),  # its builder cannot run on the meta device
    ("quantized_mobilenet_v3_large", True),  # swept as the float variant
    ("vgg11_max_pool", True),
    ("vit_b_16", False),
    ("shufflenet_v2_x0_5", False),  # mean over the spatial axes, no pool
])
def test_inspection_finds_pools_wherever_they_are_written(name: str, expected: bool) -> None:
    assert catalog.has_adaptive_pool(name) is expected


def test_quantized_entries_build_as_float_models() -> None:
    model = catalog.build("quantized_resnet18")
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_input_shapes_add_the_native_size_and_keep_fixed_shapes() -> None:
    assert catalog.input_shapes("inception_v3", [160, 320], with_native=True)[-1] == (1, 3, 299, 299)
    assert catalog.input_shapes("resnet18", [160], with_native=False) == [(1, 3, 160, 160)]
    assert catalog.input_shapes("r3d_18", [160, 320], with_native=True) == [(1, 3, 4, 112, 112)]


@pytest.mark.parametrize("name,size", [("squeezenet1_1", 96), ("densenet121", 64), ("vgg11_max_pool", 96),
                                       ("pspnet_resnet18", 160)])
def test_sweep_case_passes_end_to_end(name: str, size: int, tmp_path) -> None:
    case = zoo.check(name, (1, 3, size, size), str(tmp_path), ["torchscript", "dynamo"])
    assert case.status == "pass", case.reason
    assert case.pools and not case.unconverted
    assert case.eager_max_error is not None and case.eager_max_error <= 1e-4
    assert case.torchscript_ort_error is not None and case.dynamo_ort_error is not None
    assert case.ort_ms_converted


def test_max_pool_variant_shows_what_the_stock_exporters_cannot_do(tmp_path) -> None:
    case = zoo.check("vgg11_max_pool", (1, 3, 96, 96), str(tmp_path), ["dynamo"])  # 3x3 -> 7x7 max
    assert case.status == "pass", case.reason
    assert case.stock_torchscript.startswith("fails")
    assert "MaxPool" in case.converted_ops and "GatherND" not in case.converted_ops


def test_eager_check_in_another_dtype_is_recorded_and_bounded(tmp_path) -> None:
    case = zoo.check("squeezenet1_1", (1, 3, 64, 64), str(tmp_path), [], dtypes=("float32", "bfloat16"))
    assert case.status == "pass", case.reason
    assert set(case.eager_errors) == {"float32", "bfloat16"}
    assert case.eager_errors["bfloat16"] <= zoo.EAGER_TOLERANCE["bfloat16"]


def test_a_model_that_cannot_run_at_the_size_is_a_skip_with_its_reason(tmp_path) -> None:
    case = zoo.check("alexnet", (1, 3, 8, 8), str(tmp_path), [])
    assert case.status == "skip" and "does not run" in case.reason


def test_reports_are_written_and_a_run_resumes_from_them(tmp_path) -> None:
    cases = [zoo.Case("alexnet", (1, 3, 160, 160), status="pass", pools=1, ort_speedup=2.0, eager_max_error=0.0),
             zoo.Case("x", (1, 3, 8, 8), status="skip", reason="because")]
    zoo.write_reports(cases, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())[1]["reason"] == "because"
    assert "1 pass, 0 fail, 1 skip" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "speedup.png").stat().st_size > 1000
    assert zoo._load_cases(tmp_path / "report.json") == cases
    assert zoo.main(["--models", "alexnet", "--sizes", "160", "--report", str(tmp_path), "--resume"]) == 0
    assert json.loads((tmp_path / "report.json").read_text())[0]["ort_speedup"] == 2.0  # kept, not rerun


@pytest.mark.slow
def test_full_sweep_default_set(tmp_path) -> None:
    assert zoo.main(["--report", str(tmp_path)]) == 0


@pytest.mark.cuda
def test_cuda_sweep_case_checks_three_dtypes(tmp_path) -> None:
    case = zoo.check("squeezenet1_1", (1, 3, 96, 96), str(tmp_path), ["dynamo"], device="cuda",
                     dtypes=tuple(zoo.DTYPES))
    assert case.status == "pass", case.reason
    assert set(case.eager_errors) == set(zoo.DTYPES)


def test_shards_split_the_sweep_and_merge_back(tmp_path) -> None:
    cases = {k: zoo.Case(m, (1, 3, s, s), status="pass", eager_max_error=0.0)
             for k, (m, s) in enumerate([("alexnet", 160), ("alexnet", 320), ("vgg11", 160)])}
    zoo.write_reports([cases[0], cases[2]], tmp_path / "a", picture=False)
    zoo.write_reports([cases[1]], tmp_path / "b", picture=False)
    assert zoo.main(["--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--report", str(tmp_path / "all")]) == 0
    merged = zoo._load_cases(tmp_path / "all" / "report.json")
    assert [(c.model, c.input_shape[-1]) for c in merged] == [("alexnet", 160), ("alexnet", 320), ("vgg11", 160)]
    with pytest.raises(SystemExit):
        zoo.main(["--shard", "3/2"])


def test_a_model_torch_export_cannot_capture_either_way_is_not_blamed_on_fxpool() -> None:
    class TorchExportError(RuntimeError):
        pass

    assert zoo._torch_export_cannot_capture(TorchExportError(), TorchExportError())
    assert not zoo._torch_export_cannot_capture(TorchExportError(), None)  # the original exports: ours must
    assert not zoo._torch_export_cannot_capture(TorchExportError(), NotImplementedError())
    assert not zoo._torch_export_cannot_capture(ValueError(), TorchExportError())
