"""A representative slice of the zoo sweep on CPU; the full sweep is `make zoo ZOO_ARGS=--all`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model_zoo_checks import catalog, zoo


@pytest.mark.parametrize(
    "name,expected",
    [
        ("resnet18", True),  # nn.AdaptiveAvgPool2d
        ("densenet121", True),  # F.adaptive_avg_pool2d in forward
        ("mobilenet_v2", True),  # F.adaptive_avg_pool2d in _forward_impl, not in forward
        ("regnet_x_400mf", True),  # its builder cannot run on the meta device
        ("quantized_mobilenet_v3_large", True),  # swept as the float variant
        ("vgg11_max_pool", True),
        ("vit_b_16", False),
        ("shufflenet_v2_x0_5", False),  # mean over the spatial axes, no pool
    ],
)
def test_inspection_finds_pools_wherever_they_are_written(name: str, expected: bool) -> None:
    assert catalog.has_adaptive_pool(name) is expected


def test_quantized_entries_build_as_float_models() -> None:
    model = catalog.build("quantized_resnet18")
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_input_shapes_add_the_native_size_and_keep_fixed_shapes() -> None:
    assert catalog.input_shapes("inception_v3", [160, 320], with_native=True)[-1] == (1, 3, 299, 299)
    assert catalog.input_shapes("resnet18", [160], with_native=False) == [(1, 3, 160, 160)]
    assert catalog.input_shapes("r3d_18", [160, 320], with_native=True) == [(1, 3, 4, 112, 112)]


@pytest.mark.parametrize(
    "name,size", [("squeezenet1_1", 96), ("densenet121", 64), ("vgg11_max_pool", 96), ("pspnet_resnet18", 160)]
)
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
    cases = [
        zoo.Case("alexnet", (1, 3, 160, 160), status="pass", pools=1, ort_speedup=2.0, eager_max_error=0.0),
        zoo.Case("x", (1, 3, 8, 8), status="skip", reason="because"),
    ]
    zoo.write_reports(cases, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())[1]["reason"] == "because"
    assert "1 pass, 0 fail, 1 skip" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "zoo.png").stat().st_size > 1000 and (tmp_path / "zoo.svg").is_file()
    assert [zoo.case_from_record(r) for r in json.loads((tmp_path / "report.json").read_text())] == cases
    resumed = ["--models", "alexnet", "--sizes", "160", "--report", str(tmp_path), "--resume", "--backend", "processes"]
    assert zoo.main(resumed) == 0
    assert json.loads((tmp_path / "report.json").read_text())[0]["ort_speedup"] == 2.0  # kept, not rerun


@pytest.mark.slow
def test_full_sweep_default_set(tmp_path) -> None:
    assert zoo.main(["--report", str(tmp_path), "--backend", "processes"]) == 0


@pytest.mark.cuda
def test_cuda_sweep_case_checks_three_dtypes(tmp_path) -> None:
    case = zoo.check("squeezenet1_1", (1, 3, 96, 96), str(tmp_path), ["dynamo"], device="cuda", dtypes=tuple(zoo.DTYPES))
    assert case.status == "pass", case.reason
    assert set(case.eager_errors) == set(zoo.DTYPES)


def test_a_model_torch_export_cannot_capture_either_way_is_not_blamed_on_fxpool() -> None:
    class TorchExportError(RuntimeError):
        pass

    assert zoo._torch_export_cannot_capture(TorchExportError(), TorchExportError())
    assert not zoo._torch_export_cannot_capture(TorchExportError(), None)  # the original exports: ours must
    assert not zoo._torch_export_cannot_capture(TorchExportError(), NotImplementedError())
    assert not zoo._torch_export_cannot_capture(ValueError(), TorchExportError())


def test_a_case_records_what_each_exporter_does_and_each_pools_speed(tmp_path) -> None:
    case = zoo.check("vgg11_max_pool", (1, 3, 96, 96), str(tmp_path), zoo.EXPORTERS)  # 3x3 -> 7x7 max
    assert case.status == "pass", case.reason
    assert case.stock_torchscript.startswith("fails: SymbolicValueError: Unsupported: ONNX export of operator adaptive_max_pool2d")
    assert case.stock_dynamo.startswith("fails: DispatchError: No ONNX function found")  # the reason, not "Next steps:"
    assert case.converted_torchscript == case.converted_dynamo == case.converted_torch_export == "ok"
    assert case.fxpool_torchscript == case.fxpool_dynamo == ""  # every pool replaced: the plain exports suffice
    assert case.pt2 == "ok" and case.pt2_pools == case.pt2_converted == 1 and case.pt2_error == 0.0  # PT2 in, PT2 out
    (pool,) = case.pool_speeds
    assert pool["pool"] == "max 512x3x3->7x7" and pool["ort_ms_fxpool"] > 0 and pool["ort_ms_stock"] is None
    assert case.ort_noise is not None and 0.5 < case.ort_noise < 2


def test_the_capture_takes_python_and_file_descriptor_output_and_leaves_the_console(tmp_path) -> None:
    # In a process of its own: pytest replaces sys.stdout and the warning machinery in this one.
    script = f"""
import os, sys, warnings
from pathlib import Path
from model_zoo_checks.capture import captured, console
terminal = console()
with captured(Path({str(tmp_path / "case.log")!r})):
    print("from python")
    os.write(2, b"from the C++ side\\n")
    warnings.warn("an exporter's deprecation", DeprecationWarning)
    terminal.write("progress\\n")
print("after")
"""
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent
    )
    assert run.returncode == 0, run.stderr
    log = (tmp_path / "case.log").read_text()
    assert "from python" in log and "from the C++ side" in log and "an exporter's deprecation" in log
    assert run.stderr == "progress\n" and run.stdout == "after\n"


def _case(model: str, size: int, **fields) -> zoo.Case:
    defaults = dict(
        status="pass",
        pools=1,
        replacements={"kron-matmul": 1},
        eager_max_error=1e-7,
        stock_torchscript="fails: SymbolicValueError: Unsupported",
        converted_torchscript="ok",
        stock_dynamo="ok: GatherND, Where",
        converted_dynamo="ok",
        converted_torch_export="ok",
        ort_speedup=1.02,
        ort_noise=0.98,
        pool_speeds=[
            {"pool": "avg 512x10x10->7x7", "replacement": "kron-matmul", "ort_ms_fxpool": 0.1, "ort_ms_stock": 0.5, "stock": "ok"}
        ],
    )
    return zoo.Case(model, (1, 3, size, size), **(defaults | fields))


def test_the_summary_and_report_say_what_exports_and_how_fast_the_pools_are(tmp_path) -> None:
    from model_zoo_checks.reporting import markdown, summary, write_reports

    cases = [
        _case("vgg11", 160, pt2="ok", pt2_pools=1, pt2_converted=1, pt2_error=0.0),
        _case("resnet18", 160, stock_torchscript="ok", stock_dynamo="ok", pool_speeds=[], pt2="ok", pt2_pools=2, pt2_converted=2),
        _case(
            "vgg11_max_pool",
            160,
            status="fail",
            reason="ExportFailedError: it broke",
            log="logs/x.log",
            stock_dynamo="fails: DispatchError: No ONNX function found",
            pool_speeds=[
                {
                    "pool": "max 512x5x5->7x7",
                    "replacement": "gather",
                    "ort_ms_fxpool": 1.0,
                    "ort_ms_stock": None,
                    "stock": "DispatchError",
                }
            ],
        ),
    ]
    text = summary(cases)
    assert "3 cases of 3 models: 2 pass, 1 fail, 0 skip" in text
    assert "TorchScript, stock       exports 1/3" in text and "TorchScript, converted   exports 3/3" in text
    assert "dynamo, stock            exports 2/3 (1 only as the GatherND/Where decomposition)" in text
    assert "median 5.0x (from 5.0x to 5.0x over 1 distinct pools); 1 more the stock dynamo exporter cannot export" in text
    assert "FAIL vgg11_max_pool 1x3x160x160: ExportFailedError: it broke" in text
    assert "PT2 in, PT2 out: 2 of 2 torch.export programs of the originals converted exactly; 3 ATen pools, 3 replaced" in text
    assert len(text.splitlines()) < 15
    no_band = summary([_case("vgg11", 160, ort_noise=None)])  # a report from before the A/A timing
    assert "whole models in onnxruntime, stock dynamo / fxpool: median 1.02x (from 1.02 to 1.02)" in no_band
    report = markdown(cases)
    assert "| avg 512x10x10->7x7 | kron-matmul | 0.100 | 0.500 | 5.0 | vgg11@160x160 |" in report
    assert "(exporter output: `logs/x.log`)" in report
    assert "| 1/1 (0.0e+00) |" in report and "| 2/2 |" in report  # the PT2 column: pools replaced (error)
    pytest.importorskip("matplotlib")
    write_reports(cases, tmp_path)
    assert (tmp_path / "zoo.png").stat().st_size > 10_000


def test_suites_are_named_built_and_sized_by_their_own_rules() -> None:
    pytest.importorskip("timm")
    pytest.importorskip("segmentation_models_pytorch")
    assert [catalog.suite_of(n) for n in ("alexnet", "timm/resnet18:max", "smp/PSPNet-resnet18")] == ["torchvision", "timm", "smp"]
    assert catalog.input_shapes("timm/resnet10t", None, with_native=False) == [(1, 3, 176, 176), (1, 3, 202, 202)]
    assert catalog.input_shapes("timm/nest_tiny", None, with_native=False)[-1] == (1, 3, 256, 256)
    assert catalog.input_shapes("smp/PSPNet-resnet18", None, with_native=False) == [(1, 3, 320, 320), (1, 3, 512, 512)]
    assert catalog.input_shapes("alexnet", None, with_native=False) == [(1, 3, 160, 160), (1, 3, 320, 320)]
    assert type(catalog.build("timm/resnet18:catavgmax").global_pool.pool).__name__ == "AdaptiveCatAvgMaxPool2d"
    built_for_one_size = catalog.build("timm/nest_tiny", (1, 3, 256, 256))
    assert built_for_one_size(torch.randn(1, 3, 256, 256)).shape == (1, 1000)
    smp_names = catalog.swept_names(["smp"])
    assert {"smp/DPT-tu-resnet18", "smp/UPerNet-mobilenet_v2", "smp/Unet-resnet18:scse"} <= set(smp_names)
    assert len(catalog.swept_names(["timm"])) == len(set(catalog.swept_names(["timm"]))) >= 60
    assert catalog.default_names(["timm", "smp"]) == [*catalog.timm_suite.DEFAULT, *catalog.smp_suite.DEFAULT]


@pytest.mark.parametrize("name,size", [("timm/resnet18:catavgmax", 64), ("smp/PSPNet-resnet18", 160)])
def test_timm_and_smp_cases_pass_end_to_end_with_the_census(name: str, size: int, tmp_path) -> None:
    pytest.importorskip(name.split("/")[0].replace("smp", "segmentation_models_pytorch"))
    case = zoo.check(name, (1, 3, size, size), str(tmp_path), zoo.EXPORTERS)
    assert case.status == "pass", case.reason
    assert sum(case.pool_calls.values()) == case.reported_calls >= 2 and case.pool_calls_converted == {}
    assert case.pool_calls_converted_export == {}  # the branch the ONNX exporters take is converted too
    assert case.torchscript_ort_error is not None and case.dynamo_ort_error is not None
    assert case.converted_torch_export == "ok" and case.torch_export_error is not None
    if name.startswith("smp/PSPNet"):  # smp's PSPBlock pools by area interpolation under export
        assert case.export_branch_pools == 4 and case.pool_calls_export == {"interpolate(area)": 4}


@torch.library.custom_op("fxpool_tests::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:  # an op no ONNX exporter knows
    return x * 2


@_twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _UnknownOpThenPool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(_twice(x))


def test_a_model_the_exporters_cannot_take_anyway_is_not_blamed_on_fxpool(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(zoo, "build", lambda name, shape=None: _UnknownOpThenPool().eval())
    case = zoo.check("unknown_op_then_pool", (1, 3, 10, 10), str(tmp_path), ["torchscript", "dynamo"])
    assert case.status == "pass", case.reason
    assert case.stock_torchscript.startswith("fails") and case.stock_dynamo.startswith("fails")
    assert "TorchScript exporter fails on the original and the converted model alike" in case.reason
    assert "dynamo exporter fails on the original and the converted model alike" in case.reason
    assert case.pools == 1 and case.pool_calls == {"adaptive_avg_pool2d": 1}


@pytest.mark.slow
def test_the_timm_family_table_covers_every_family_with_a_pool() -> None:
    pytest.importorskip("timm")
    found = catalog.timm_suite.discover_families(catalog.holds_a_pool)
    assert set(found) == set(catalog.timm_suite.FAMILIES)
    assert all(model in found[family] for family, model in catalog.timm_suite.FAMILIES.items())


@pytest.mark.slow
def test_the_transformers_family_table_covers_every_family_with_a_pool() -> None:
    pytest.importorskip("transformers")
    assert catalog.transformers_suite.discover(catalog.holds_a_pool) == catalog.transformers_suite.FAMILIES


def test_the_monai_table_covers_every_network_module_with_a_pool() -> None:
    pytest.importorskip("monai")
    swept = {module for module, _ in catalog.monai_suite.NETWORKS.values()}
    assert catalog.monai_suite.discover() == swept | set(catalog.monai_suite.NOT_SWEPT)


@pytest.mark.parametrize(
    "name,shape",
    [
        ("hf/upernet:convnext", (1, 3, 128, 128)),  # the pyramid on 4x4: 4->3 and 4->6 by kron-matmul
        ("hf/mobilenet_v2", (1, 3, 96, 96)),
        ("monai/SEResNet50", (1, 1, 21, 23, 25)),
    ],
)
def test_transformers_and_monai_cases_pass_end_to_end_with_every_plain_export(name: str, shape, tmp_path) -> None:
    pytest.importorskip({"hf": "transformers", "monai": "monai"}[name.split("/")[0]])
    case = zoo.check(name, shape, str(tmp_path), zoo.EXPORTERS)
    assert case.status == "pass", case.reason
    assert (
        sum(case.pool_calls.values()) == case.reported_calls >= 1
        and case.pool_calls_converted == {} == case.pool_calls_converted_export
    )
    assert case.converted_torchscript == "ok" and case.converted_dynamo.startswith("ok") and case.converted_torch_export == "ok"
    assert case.fxpool_torchscript == case.fxpool_dynamo == ""  # the plain exports of the converted model suffice
    assert case.convert_forwards is not None


def test_a_case_over_tolerance_fails_under_python_optimize(tmp_path) -> None:
    # The verdicts are exceptions, not asserts: `python -O` strips asserts and must not turn a fail into a pass.
    script = f"""
from model_zoo_checks import zoo
zoo.EAGER_TOLERANCE = {{"float32": -1.0}}
case = zoo.check("squeezenet1_1", (1, 3, 64, 64), {str(tmp_path)!r}, ["dynamo"])
print(case.status, case.reason)
"""
    run = subprocess.run(
        [sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("fail eager error 0 over -1"), run.stdout


def test_a_model_that_cannot_be_built_is_a_failed_case_not_an_exception(tmp_path, monkeypatch) -> None:
    def broken(name, shape):
        raise RuntimeError("no such weights")

    monkeypatch.setattr(zoo, "build", broken)
    case = zoo.check("alexnet", (1, 3, 64, 64), str(tmp_path), ["dynamo"])
    assert (case.status, case.reason) == ("fail", "the model cannot be built: RuntimeError: no such weights")
    assert "Traceback" in case.details[0]


def test_an_original_that_does_not_run_at_the_shape_is_skipped(tmp_path) -> None:
    case = zoo.check("alexnet", (1, 3, 8, 8), str(tmp_path), ["dynamo"])  # its max pools shrink 8x8 to nothing
    assert case.status == "skip" and case.reason.startswith("the original model does not run at (1, 3, 8, 8)")


def test_the_registry_census_says_which_models_hold_a_pool_and_what_they_cost() -> None:
    from model_zoo_checks import registry

    rows = registry.census()
    assert rows["resnet18"].holds_pool and rows["resnet18"].params == 11_689_512 and rows["resnet18"].size == (224, 224)
    assert not rows["vit_b_16"].holds_pool  # torchvision's ViT pools by indexing the class token
    larger, smaller = catalog.cost("resnet18", (1, 3, 320, 320)), catalog.cost("resnet18", (1, 3, 160, 160))
    assert larger == 4 * smaller > catalog.cost("alexnet", (1, 3, 8, 8))


def test_every_model_reports_the_models_without_a_pool_and_runs_the_rest() -> None:
    from model_zoo_checks import plan, registry

    names = catalog.every_name(["torchvision"])
    assert {"vit_b_16", "raft_small", "resnet18", "pspnet_resnet18"} <= set(names)
    reasons = plan.unswept(names, every_model=True)
    assert reasons["vit_b_16"] == catalog.NO_POOL and "resnet18" not in reasons
    assert set(names) - set(reasons) == {n for n in names if registry.census()[n].holds_pool}


def test_the_pytorchcv_suite_sweeps_one_model_per_family_at_its_own_size_and_another() -> None:
    pytest.importorskip("pytorchcv")
    names = catalog.swept_names(["pytorchcv"])
    families = [catalog.pytorchcv_suite.family(n) for n in names]
    assert len(families) == len(set(families)) == 43 and "pytorchcv/seresnet10" in names  # the smallest SE-ResNet
    assert catalog.input_shapes("pytorchcv/seresnet10", None, with_native=False) == [(1, 3, 224, 224), (1, 3, 250, 250)]
    assert catalog.input_shapes("pytorchcv/seresnet20_cifar10", None, with_native=False) == [(1, 3, 32, 32), (1, 3, 58, 58)]
    assert "librosa" in catalog.not_swept("pytorchcv/quartznet5x5_en_ls")
    assert catalog.build("pytorchcv/seresnet10")(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


@pytest.mark.slow
def test_the_registry_census_covers_the_installed_libraries() -> None:
    import importlib.metadata
    import json

    from model_zoo_checks import registry

    kept = json.loads(registry.PATH.read_text())
    for suite, library in registry.LIBRARIES.items():
        if not catalog.installed(suite):
            continue
        rewrite = f"python -m model_zoo_checks.registry --suite {suite}"
        assert kept["versions"][suite] == importlib.metadata.version(library), rewrite
        censused = {n for n in registry.census() if catalog.suite_of(n) == suite}
        assert censused == set(catalog.every_name([suite]))
