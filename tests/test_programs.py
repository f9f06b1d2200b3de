"""torch.export programs: ``fxpool.convert(ExportedProgram)`` and ATen-level GraphModules (fxpool.programs)."""

from __future__ import annotations

import io
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxpool
from fxpool import programs
from fxpool.calls import ATEN_FORMS, describe_aten
from fxpool.errors import FxpoolError, UnconvertedPoolError, UnconvertedPoolWarning

AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}

# (spatial input sizes, output_size): divisible, not divisible, output larger than input, None entries
CASES = {
    1: [((12,), 4), ((10,), 3), ((5,), 9)],
    2: [((12, 8), (4, 2)), ((10, 11), (3, 5)), ((5, 6), (7, 13)), ((9, 10), (None, 4))],
    3: [((4, 6, 8), 2), ((5, 6, 7), (2, 4, 3)), ((3, 4, 5), (None, 6, None))],
}


class Pool(nn.Module):
    """A convolution-free pool between two elementwise ops, so the pool is not the program's only node."""

    def __init__(self, family: str, dims: int, output_size: object) -> None:
        super().__init__()
        self.family, self.dims, self.output_size = family, dims, output_size
        self.scale = nn.Parameter(torch.tensor(1.5))
        self.register_buffer("shift", torch.tensor(0.25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = (AVG if self.family == "avg" else MAX)[self.dims]
        return pool(x * self.scale, self.output_size) + self.shift


def _cases() -> list[tuple[str, int, tuple[int, ...], object]]:
    return [(family, dims, sizes, out) for family in ("avg", "max") for dims, cases in CASES.items() for sizes, out in cases]


def _tolerances(family: str) -> dict[str, float]:
    return {"rtol": 0.0, "atol": 0.0} if family == "max" else {"rtol": 1e-5, "atol": 1e-6}


def _exported(family: str, dims: int, sizes: tuple[int, ...], out: object) -> tuple[torch.export.ExportedProgram, torch.Tensor]:
    x = torch.randn(2, 3, *sizes)
    return torch.export.export(Pool(family, dims, out), (x,)), x


@pytest.mark.parametrize("decomposed", [False, True], ids=["export", "run_decompositions"])
@pytest.mark.parametrize(("family", "dims", "sizes", "out"), _cases())
def test_every_pool_kind_converts_exactly(family: str, dims: int, sizes: tuple[int, ...], out: object, decomposed: bool) -> None:
    program, _ = _exported(family, dims, sizes, out)
    if decomposed:
        program = program.run_decompositions()
    converted = fxpool.convert(program, strict=True)

    assert isinstance(converted, torch.export.ExportedProgram) and converted is not program
    report = fxpool.report_of(converted)
    assert len(report.records) == 1 and report.stands_alone, report
    assert report.records[0].form == "aten" and report.records[0].location.startswith("<program>:")
    assert not [n for n in converted.graph.nodes if n.op == "call_function" and n.target in ATEN_FORMS]
    fresh = torch.randn(2, 3, *sizes)
    torch.testing.assert_close(converted.module()(fresh), program.module()(fresh), **_tolerances(family))
    if decomposed:  # the program stays in the ATen dialect run_decompositions gave it
        assert converted.verifiers[0].dialect == "ATEN"


def test_signature_and_state_are_kept_and_the_callers_program_is_unchanged() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.AdaptiveAvgPool2d((3, 5)), nn.Flatten(), nn.Linear(120, 4)
    ).eval()
    x = torch.randn(2, 3, 15, 17)
    program = torch.export.export(model, (x,))
    code, state = program.graph_module.code, {k: v.clone() for k, v in program.state_dict.items()}

    converted = fxpool.convert(program)

    assert converted.state_dict.keys() == program.state_dict.keys()
    for name, tensor in converted.state_dict.items():
        assert torch.equal(tensor, program.state_dict[name])
    assert converted.graph_signature.user_inputs == program.graph_signature.user_inputs
    assert len(converted.graph_signature.user_outputs) == len(program.graph_signature.user_outputs)
    assert converted.call_spec.in_spec == program.call_spec.in_spec
    assert program.graph_module.code == code  # the caller's program: same graph, same state
    for name, tensor in program.state_dict.items():
        assert torch.equal(tensor, state[name])
    torch.testing.assert_close(converted.module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_the_program_needs_no_fxpool_code_and_no_compiler() -> None:
    program, x = _exported("max", 2, (10, 11), (3, 5))
    converted = fxpool.convert(program)
    for node in converted.graph.nodes:
        if node.op == "call_function":
            assert node.target is operator.getitem or (
                isinstance(node.target, torch._ops.OpOverload) and node.target.namespace == "aten"
            ), node.format_node()
    assert not [n.name for n in converted.graph.nodes if n.op == "placeholder" and not n.users]  # no dead constants
    # runs as it is, in eager: no AOTInductor, no torch.compile, no custom op
    torch.testing.assert_close(converted.module()(x), program.module()(x), rtol=0.0, atol=0.0)


def test_a_pt2_round_trip_converts_the_same(tmp_path) -> None:
    program, x = _exported("avg", 2, (10, 11), (3, 5))
    path = tmp_path / "pool.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path)

    direct, via_file = fxpool.convert(program), fxpool.convert(loaded)

    assert [r.replacement for r in fxpool.report_of(via_file).records] == [r.replacement for r in fxpool.report_of(direct).records]
    buffer = io.BytesIO()
    torch.export.save(via_file, buffer)
    buffer.seek(0)
    back = torch.export.load(buffer)
    torch.testing.assert_close(back.module()(x), program.module()(x), rtol=1e-5, atol=1e-6)


def test_without_stored_example_inputs_random_inputs_of_the_example_shapes() -> None:
    program, x = _exported("avg", 2, (10, 11), (3, 5))
    program.example_inputs = None
    converted = fxpool.convert(program)
    assert "Tensor(2, 3, 10, 11)" in fxpool.report_of(converted).check.compared
    torch.testing.assert_close(converted.module()(x), program.module()(x), rtol=1e-5, atol=1e-6)


def test_symbolic_spatial_sizes_get_the_dynamic_form() -> None:
    class Head(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (
                F.adaptive_avg_pool2d(x, (5, 7)),
                F.adaptive_max_pool2d(x, 3),
                F.adaptive_avg_pool2d(x, 1),
                F.adaptive_avg_pool2d(x, (None, 4)),
            )

    x = torch.randn(2, 3, 12, 13)
    height = torch.export.Dim("height", min=4, max=64)
    program = torch.export.export(Head(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch"), 2: height}})

    converted = fxpool.convert(program, strict=True)

    kinds = [r.kind for r in fxpool.report_of(converted).records]
    assert kinds == ["dynamic", "dynamic", "mean", "dynamic"], kinds
    assert "symbolic" in fxpool.report_of(converted).records[0].reason
    placeholder = next(n for n in converted.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert not all(isinstance(s, int) for s in placeholder.meta["val"].shape)  # still symbolic
    for shape in [(2, 3, 12, 13), (3, 3, 20, 13), (1, 3, 7, 13), (1, 3, 64, 13)]:
        fresh = torch.randn(shape)
        for ours, theirs in zip(converted.module()(fresh), program.module()(fresh)):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_graph_module_of_a_program_is_converted() -> None:
    program, x = _exported("avg", 2, (10, 11), (3, 5))
    module = program.module()

    converted = fxpool.convert(module, x, strict=True)

    report = fxpool.report_of(converted)
    assert len(report.records) == 1 and report.records[0].location.startswith("<graph>:") and report.stands_alone
    assert isinstance(converted, torch.fx.GraphModule) and converted is not module
    assert any(n.op == "call_function" and n.target in ATEN_FORMS for n in module.graph.nodes)  # the caller's, untouched
    assert module.graph.owning_module is module
    torch.testing.assert_close(converted(x), module(x), rtol=1e-5, atol=1e-6)
    again = torch.export.export(converted, (x,))  # and it exports as any converted model does
    assert not [n for n in again.graph.nodes if n.op == "call_function" and n.target in ATEN_FORMS]


class IndicesUsed(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = F.adaptive_max_pool2d(x, 3, return_indices=True)
        return values + F.adaptive_avg_pool2d(x, 3), indices


def test_max_pools_whose_indices_are_used_get_the_window_argmax_with_pytorchs_indices() -> None:
    x = torch.randn(1, 2, 10, 11)
    x[0, 0, :4, :4] = 1.0  # ties: PyTorch's first maximum
    x[0, 1, 5, 5] = float("nan")
    program = torch.export.export(IndicesUsed(), (x,))

    converted = fxpool.convert(program, strict=True)
    report = fxpool.report_of(converted)
    assert [r.kind for r in report.records] == ["argmax", report.records[1].kind] and report.stands_alone
    assert report.records[0].input_shape == (1, 2, 10, 11)
    assert not [n for n in converted.graph.nodes if n.op == "call_function" and n.target in ATEN_FORMS]
    values, indices = converted.module()(x)
    expected_values, expected_indices = program.module()(x)
    torch.testing.assert_close(values, expected_values, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert torch.equal(indices, expected_indices)
    assert torch.equal(fxpool.convert(program.module(), x, strict=True)(x)[1], expected_indices)


def test_max_pools_whose_indices_are_used_at_a_symbolic_size_are_left_and_strict_refuses() -> None:
    x = torch.randn(1, 2, 10, 11)
    height = torch.export.Dim("h", min=4, max=64)
    program = torch.export.export(IndicesUsed(), (x,), dynamic_shapes={"x": {2: height}})

    with pytest.raises(UnconvertedPoolError, match=r"(?s)<program>:adaptive_max_pool2d.*indices"):
        fxpool.convert(program, strict=True)
    with pytest.warns(UnconvertedPoolWarning, match=r"<program>:adaptive_max_pool2d") as caught:
        converted = fxpool.convert(program)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    report = fxpool.report_of(converted)
    assert [r.converted for r in report.records] == [False, True]
    assert report.records[0].input_shape == (1, 2, 10, 11)
    for size in (10, 17):
        y = torch.randn(1, 2, size, 11)
        values, indices = converted.module()(y)
        expected_values, expected_indices = program.module()(y)
        torch.testing.assert_close(values, expected_values, rtol=1e-5, atol=1e-6)
        assert torch.equal(indices, expected_indices)


def test_a_max_pool_whose_values_only_are_used_is_replaced() -> None:
    class ValuesOnly(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.adaptive_max_pool2d(x, (4, 3), return_indices=True)[0] * 2

    x = torch.randn(1, 2, 10, 11)
    program = torch.export.export(ValuesOnly(), (x,))
    converted = fxpool.convert(program, strict=True)
    assert fxpool.report_of(converted).stands_alone
    assert torch.equal(converted.module()(x), program.module()(x))


def test_a_replacement_that_differs_is_undone_and_strict_names_the_node(monkeypatch) -> None:
    from fxpool import building

    program, x = _exported("avg", 2, (10, 11), (3, 5))
    real = building.replacement_module

    def off_by_one(*args: object) -> nn.Module:
        replacement = real(*args)  # type: ignore[arg-type]
        forward = replacement.forward
        replacement.forward = lambda x: forward(x) + 1.0  # type: ignore[method-assign]
        return replacement

    monkeypatch.setattr(programs, "replacement_module", off_by_one)
    with pytest.raises(UnconvertedPoolError, match=r"(?s)<program>:adaptive_avg_pool2d .* 2x3x10x11 -> \(3, 5\).*differed from"):
        fxpool.convert(program, strict=True)
    with pytest.warns(UnconvertedPoolWarning, match=r"self-check undid"):
        converted = fxpool.convert(program)
    report = fxpool.report_of(converted)
    assert not report.converted and "differed from the native pool" in report.records[0].reason
    torch.testing.assert_close(converted.module()(x), program.module()(x), rtol=0, atol=0)


def test_a_program_without_pools_is_returned_as_a_new_program_with_an_empty_report() -> None:
    program = torch.export.export(nn.Linear(4, 2), (torch.randn(3, 4),))
    converted = fxpool.convert(program, strict=True)
    assert converted is not program and not fxpool.report_of(converted).records
    assert fxpool.report_of(converted).check.status == "skipped"


def test_an_nn_module_still_needs_its_example() -> None:
    with pytest.raises(TypeError, match="example input"):
        fxpool.convert(nn.AdaptiveAvgPool2d(3))


def test_explain_reads_a_program() -> None:
    program, _ = _exported("max", 3, (5, 6, 7), (2, 4, 3))
    report = fxpool.explain(program)
    assert len(report.records) == 1 and report.records[0].op == "aten.adaptive_max_pool3d.default"


def test_describe_aten_reads_every_operator() -> None:
    assert {form.op for form in ATEN_FORMS.values()} == {
        f"aten.{name}.default"
        for name in (
            "adaptive_avg_pool1d",
            "adaptive_avg_pool2d",
            "adaptive_avg_pool3d",
            "_adaptive_avg_pool2d",
            "_adaptive_avg_pool3d",
            "adaptive_max_pool1d",
            "adaptive_max_pool2d",
            "adaptive_max_pool3d",
        )
    }
    described = describe_aten(torch.ops.aten.adaptive_max_pool3d.default, ("x", [2, 3, 4]), {})
    assert described is not None and described[0].output_size == (2, 3, 4) and described[1] == "x"
    assert describe_aten(torch.ops.aten.avg_pool2d.default, ("x", [2, 2]), {}) is None


def test_a_pool_in_a_cond_branch_is_reported_left() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda t: F.adaptive_avg_pool2d(t, 3), lambda t: F.adaptive_avg_pool2d(t, 3) * 2, (x,))

    x = torch.randn(1, 2, 9, 10)
    program = torch.export.export(Branchy(), (x,))
    assert programs.has_aten_pools(program.module())
    with pytest.raises(UnconvertedPoolError, match="subgraph"):
        fxpool.convert(program, strict=True)
    with pytest.warns(UnconvertedPoolWarning):
        assert len(fxpool.report_of(fxpool.convert(program)).records) == 2


def test_the_converted_program_lowers_to_onnx_without_gathernd(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    from fxpool.verifying import op_histogram, run_onnxruntime

    class Head(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return (
                F.adaptive_avg_pool2d(x, (5, 7)),
                F.adaptive_max_pool2d(x, (4, 6)),
                F.adaptive_avg_pool3d(x.unsqueeze(2), (1, 3, 3)),
            )

    x = torch.randn(2, 3, 12, 13)
    program = torch.export.export(Head(), (x,))
    converted = fxpool.convert(program, strict=True)
    path = str(tmp_path / "program.onnx")

    torch.onnx.export(converted, f=path, dynamo=True)

    ops = op_histogram(path)
    assert not {"GatherND", "ScatterND", "Loop", "If"} & set(ops), ops
    for ours, theirs in zip(run_onnxruntime(path, x), program.module()(x)):
        torch.testing.assert_close(torch.from_numpy(ours), theirs, rtol=1e-5, atol=1e-5)


def test_a_program_whose_reexport_fails_is_an_fxpool_error(monkeypatch) -> None:
    program, _ = _exported("avg", 2, (10, 11), (3, 5))

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no")

    monkeypatch.setattr(torch.export, "export", refuse)
    with pytest.raises(FxpoolError, match="torch.export of the converted program failed"):
        fxpool.convert(program)


def test_the_cli_inspects_and_exports_a_pt2_file_without_an_input_shape(tmp_path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    from fxpool import cli
    from fxpool.verifying import op_histogram

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((5, 7)), nn.AdaptiveMaxPool2d(3)).eval()
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 17, 19),)), path)

    assert cli.main(["inspect", str(path), "--strict"]) == 0
    assert "2 adaptive pool(s): 2 converted" in capsys.readouterr().out
    out = tmp_path / "model.onnx"
    assert cli.main(["export", str(path), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "onnxruntime max abs error" in printed and "None" not in printed.splitlines()[-1]
    assert not {"GatherND", "ScatterND"} & set(op_histogram(str(out)))
    assert cli.main(["export", str(path), "-o", str(out), "--exporter", "torchscript"]) == 2
    assert "cannot apply to a .pt2 program" in capsys.readouterr().err


def test_the_cli_still_asks_other_models_for_an_input_shape(capsys) -> None:
    from fxpool import cli

    assert cli.main(["inspect", "torch.nn:Identity"]) == 2
    assert "the following arguments are required: --input-shape" in capsys.readouterr().err


def test_a_training_program_leaves_the_callers_running_statistics_alone() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d((3, 5))).train()
    program = torch.export.export(model, (torch.randn(2, 3, 15, 17),))
    before = {name: tensor.clone() for name, tensor in program.state_dict.items()}
    fxpool.convert(program, strict=True)
    for name, tensor in program.state_dict.items():
        assert torch.equal(tensor, before[name]), name


def test_convert_options_are_accepted_for_programs() -> None:
    program, x = _exported("avg", 2, (10, 11), (3, 5))
    converted = fxpool.convert(program, dynamic=True)  # static sizes: dynamic asks the dynamic form
    assert [r.kind for r in fxpool.report_of(converted).records] == ["dynamic"]
    torch.testing.assert_close(converted.module()(x), program.module()(x), rtol=1e-5, atol=1e-6)


def test_export_of_a_programs_module_leaves_its_mode_to_its_graph(tmp_path) -> None:
    """``ExportedProgram.module()`` refuses ``.train()``: torch.export fixed the mode in its graph. ``fxpool.export``
    set the mode the export asks for on its copy and failed with NotImplementedError by either exporter; now the
    dynamo exporter writes it, verified, and an explicit train-mode request is refused by name."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(7)).eval()
    x = torch.randn(1, 3, 12, 12)
    module = torch.export.export(model, (x,)).module()
    result = fxpool.export(module, x, str(tmp_path / "m.onnx"), dynamo=True)
    assert result.verified.startswith("onnxruntime")
    with pytest.raises(ValueError, match="mode it was exported in"):
        fxpool.export(module, x, str(tmp_path / "t.onnx"), dynamo=True, training=torch.onnx.TrainingMode.TRAINING, verify=False)
