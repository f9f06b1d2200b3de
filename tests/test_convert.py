"""fxpool.convert end to end: every spelling, the report, safety, errors, models torch.fx cannot trace."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from models import EverySpelling, MaxAndIndices, PooledHead, ShapeBranch, SharedPool, UntraceableShared, WithDropout
from torch import nn

import fxpool
from fxpool import ExampleInputError, PoolCallError, SpatialSizeError, UnconvertedPoolError, report_of

F32 = dict(rtol=1e-6, atol=1e-6)


def snapshot(model: nn.Module) -> dict[str, object]:
    """Everything convert must leave bit-identical."""
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "ids": {k: id(v) for k, v in model.state_dict(keep_vars=True).items()},
        "training": {n: m.training for n, m in model.named_modules()},
        "modules": {n: id(m) for n, m in model.named_modules()},
        "hooks": {n: (len(m._forward_hooks), len(m._forward_pre_hooks)) for n, m in model.named_modules()},
    }


def assert_unchanged(model: nn.Module, before: dict[str, object]) -> None:
    after = snapshot(model)
    assert after["ids"] == before["ids"]
    assert after["training"] == before["training"]
    assert after["modules"] == before["modules"]
    assert after["hooks"] == before["hooks"]
    for key, value in before["state"].items():  # type: ignore[union-attr]
        assert torch.equal(after["state"][key], value), key  # type: ignore[index]


def test_every_spelling_is_found_and_converted_exactly() -> None:
    model = EverySpelling().eval()
    x = torch.randn(2, 3, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    report = report_of(converted)
    assert len(report.records) == 15 and not report.unconverted
    assert report.intercepted == ("",)
    torch.testing.assert_close(converted(x), model(x), **F32)
    kinds = " ".join(r.replacement for r in report.records)
    for kind in ("AvgPool2d", "AvgPool1d", "AvgPool3d", "mean", "sliding", "slices", "nearest upsample"):
        assert kind in kinds
    forms = {r.op for r in report.records}
    assert {
        "nn.AdaptiveAvgPool2d",
        "F.adaptive_avg_pool2d",
        "torch._C._nn.adaptive_avg_pool2d",
        "F.adaptive_avg_pool1d",
        "nn.AdaptiveAvgPool1d",
        "nn.AdaptiveAvgPool3d",
        "F.adaptive_avg_pool3d",
        "torch._C._nn.adaptive_avg_pool3d",
        "F.interpolate(mode='area')",
        "nn.Upsample(mode='area')",
    } <= forms
    functional = [r for r in report.records if r.form == "functional"]
    assert all(r.source and "models.py" in r.source for r in functional)
    printed = " ".join(str(report).split())  # the printed report wraps within 100 columns
    assert "sliding" in printed and "functional calls intercepted in the forward of 1 module(s): <root>" in printed


def test_gradients_match_the_original() -> None:
    model = EverySpelling().eval().double()
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64)
    converted = fxpool.convert(model, x)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn_like(model(x))
    converted(a).backward(upstream)
    model(b).backward(upstream)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    for (name, p), (_, q) in zip(converted.named_parameters(), model.named_parameters()):
        assert p is q, name  # shared, so both gradients landed on the same tensor


def test_caller_model_is_never_mutated_even_in_train_mode() -> None:
    model = EverySpelling().train()
    model.conv.register_forward_hook(lambda m, i, o: None)
    before = snapshot(model)
    x = torch.randn(2, 3, 10, 10)
    rng = torch.get_rng_state()
    converted = fxpool.convert(model, x)
    assert torch.equal(torch.get_rng_state(), rng)
    assert_unchanged(model, before)
    assert converted.training is True and converted.bn.training is True
    assert isinstance(model.module_2d, nn.AdaptiveAvgPool2d)  # the original keeps its pools
    assert converted.conv.weight is model.conv.weight  # parameters are shared, not copied
    assert converted.state_dict().keys() == model.state_dict().keys()


def test_dropout_and_batchnorm_in_train_mode_do_not_leak() -> None:
    model = WithDropout().train()
    before = snapshot(model)
    fxpool.convert(model, torch.randn(4, 3, 10, 10))
    assert_unchanged(model, before)
    assert model.bn.num_batches_tracked.item() == 0


def test_size_guard_names_node_and_fix_but_size_agnostic_pools_accept_any_size() -> None:
    model = EverySpelling().eval()
    converted = fxpool.convert(model, torch.randn(2, 3, 10, 10))
    with pytest.raises(SpatialSizeError, match=r"module_2d.*\(10, 10\).*\(12, 12\).*Convert again"):
        converted(torch.randn(2, 3, 12, 12))
    resnet_like = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    converted = fxpool.convert(resnet_like, torch.randn(1, 3, 10, 10))
    assert report_of(converted).records[0].size_agnostic
    for size in (7, 19, 32):
        x = torch.randn(2, 3, size, size)
        torch.testing.assert_close(converted(x), resnet_like(x), **F32)


def test_strict_raises_and_lists_what_would_be_left() -> None:
    # a max pool whose indices are used is left under dynamic=True (its form is specialised to one size)
    with pytest.raises(UnconvertedPoolError, match="return_indices"):
        fxpool.convert(MaxAndIndices(), torch.randn(1, 3, 10, 10), strict=True, dynamic=True)
    report = fxpool.explain(MaxAndIndices(), torch.randn(1, 3, 10, 10), dynamic=True)
    assert len(report.unconverted) == 1
    assert not fxpool.explain(MaxAndIndices(), torch.randn(1, 3, 10, 10)).unconverted


def test_plan_reports_without_returning_a_model() -> None:
    report = fxpool.explain(EverySpelling().eval(), torch.randn(1, 3, 10, 10))
    assert isinstance(report, fxpool.ConversionReport)
    assert len(report.records) == 15
    assert report.to_dict()["records"][0]["location"] == "module_2d"


def test_same_module_on_two_sizes_gets_two_replacements() -> None:
    model = SharedPool()
    x = torch.randn(1, 2, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    assert [r.location for r in report_of(converted).records] == ["pool#0", "pool#1"]
    torch.testing.assert_close(converted(x), model(x), **F32)


def test_same_module_on_two_sizes_in_untraceable_code_gets_two_replacements() -> None:
    model = UntraceableShared()
    x = torch.randn(1, 2, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    assert [r.location for r in report_of(converted).records] == ["pool#0", "pool#1"]
    torch.testing.assert_close(converted(x), model(x), **F32)


def test_a_model_torch_fx_cannot_trace_has_every_pool_converted_without_a_trace() -> None:
    model = ShapeBranch().eval()
    x = torch.randn(2, 3, 12, 12)
    converted = fxpool.convert(model, x, strict=True)
    report = report_of(converted)
    assert set(report.intercepted) == {"head", ""} and not report.unconverted
    functional = [r for r in report.records if r.form == "functional"]
    assert functional and all(r.source and "models.py" in r.source for r in functional)
    assert isinstance(model.head, PooledHead) and "forward" not in vars(model.head)  # the original child is untouched
    torch.testing.assert_close(converted(x), model(x), **F32)


def test_unbatched_and_zero_batch_inputs() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d((7, 5)))
    for x in (torch.randn(3, 10, 13), torch.randn(0, 3, 10, 13)):
        converted = fxpool.convert(model, x, strict=True)
        torch.testing.assert_close(converted(x), model(x), **F32)


def test_channels_last_inputs() -> None:
    model = EverySpelling().eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 10, 10).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(fxpool.convert(model, x)(x), model(x), **F32)


def test_converted_model_can_be_converted_and_traced_again() -> None:
    model = EverySpelling().eval()
    x = torch.randn(2, 3, 10, 10)
    once = fxpool.convert(model, x)
    twice = fxpool.convert(once, x, strict=True)
    records = report_of(twice).records
    assert len(records) == len(report_of(once).records) and all(r.replacement.startswith("already converted") for r in records)
    torch.jit.trace(once, x)
    torch.testing.assert_close(twice(x), model(x), **F32)


def test_buffers_follow_double() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(7))
    converted = fxpool.convert(model, torch.randn(1, 3, 10, 10)).double()
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64)
    torch.testing.assert_close(converted(x), model.double()(x), rtol=1e-12, atol=1e-12)


def test_quantized_input_is_left_alone_with_reason() -> None:
    class Quantized(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)
            return self.pool(q).dequantize()

    model = Quantized()
    x = torch.rand(1, 2, 10, 10)
    converted = fxpool.convert(model, x)
    (record,) = report_of(converted).records
    assert not record.converted and "quantized" in record.reason
    torch.testing.assert_close(converted(x), model(x))


# --- bad input: clear errors, nothing half-converted ---


def test_non_tensor_example_input() -> None:
    with pytest.raises(ExampleInputError, match="holds no tensor"):
        fxpool.convert(EverySpelling(), "an image")


def test_wrong_rank_example_input() -> None:
    model = nn.Sequential(nn.Flatten(0), nn.Unflatten(0, (1, 3, 5, 5)), nn.AdaptiveAvgPool2d(3))
    with pytest.raises(
        ExampleInputError,
        match=r"Sequential.forward raised RuntimeError on the example input "
        r"\(Tensor\(3, 5\)\).*Nothing was converted",
    ):
        fxpool.convert(model, torch.randn(3, 5))

    class RankFive(nn.Module):
        def forward(self, x):
            return F.adaptive_avg_pool2d(x, 3)

    with pytest.raises(
        PoolCallError,
        match=r"F.adaptive_avg_pool2d at .*test_convert.py:\d+ in forward: "
        r"input of shape \(1, 1, 2, 5, 5\) has rank 5, "
        r"but a 2d pool takes rank 3 \(unbatched\) or 4 \(batched\)",
    ):
        fxpool.convert(RankFive(), torch.randn(1, 1, 2, 5, 5))


def test_negative_output_size_names_the_call() -> None:
    class Negative(nn.Module):
        def forward(self, x):
            return F.adaptive_avg_pool2d(x, (3, -1))

    with pytest.raises(PoolCallError, match=r"F.adaptive_avg_pool2d: output_size \(3, -1\) has a negative.*test_convert.py"):
        fxpool.convert(Negative(), torch.randn(1, 2, 5, 5))
    with pytest.raises(PoolCallError, match=r"1: nn.AdaptiveAvgPool2d: output_size \(2, -3\) has a negative"):
        fxpool.convert(nn.Sequential(nn.Identity(), nn.AdaptiveAvgPool2d((2, -3))), torch.randn(1, 2, 5, 5))


def test_integer_input_to_a_pool() -> None:
    with pytest.raises(PoolCallError, match=r"dtype torch.int64.*needs a real floating tensor \(not integer or complex\)"):
        fxpool.convert(nn.AdaptiveAvgPool2d(3), torch.ones(1, 2, 5, 5, dtype=torch.int64))


def test_forward_that_raises() -> None:
    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("boom")

    with pytest.raises(ExampleInputError, match="Broken.forward raised KeyError.*Nothing was converted"):
        fxpool.convert(Broken(), torch.randn(1))


def test_not_a_module() -> None:
    with pytest.raises(TypeError, match="needs an nn.Module"):
        fxpool.convert(lambda x: x, torch.randn(1))  # type: ignore[arg-type]


# --- what the converted model keeps of the original ---


class WithExtras(nn.Module):
    """Methods, a property, an auxiliary head and a buffer that forward never touches."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(7))
        self.aux = nn.Linear(4, 2)  # unused by forward
        self.register_buffer("mean", torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1))
        self.register_buffer("calibration", torch.ones(3))  # read only by a method
        self.num_classes = 10

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x - self.mean)

    @property
    def width(self) -> int:
        return 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.forward_features(x), (3, 5)).flatten(1)


def test_converted_model_keeps_class_methods_state_and_attributes() -> None:
    import copy

    model = WithExtras().eval()
    x = torch.randn(2, 3, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    assert isinstance(converted, WithExtras) and converted.width == 4 and converted.num_classes == 10
    assert converted.state_dict().keys() == model.state_dict().keys()  # aux and both buffers included
    converted.load_state_dict(model.state_dict(), strict=True)
    assert type(converted.features[1]).__name__ == "ExactAdaptivePool"  # methods reach the replacements too
    torch.testing.assert_close(converted.forward_features(x), model.forward_features(x), **F32)
    torch.testing.assert_close(converted(x), model(x), **F32)
    clone = copy.deepcopy(converted)
    assert report_of(clone).records == report_of(converted).records and clone.num_classes == 10
    torch.testing.assert_close(clone(x), model(x), **F32)
    clone.mean.fill_(0.0)  # the copy's graph reads the copy's buffers, not the original's
    assert not torch.equal(clone(x), converted(x))
    doubled = copy.deepcopy(converted).double()  # .to() moves what the graph reads, root buffers included
    torch.testing.assert_close(doubled(x.double()), copy.deepcopy(model).double()(x.double()), rtol=1e-12, atol=1e-12)


def test_googlenet_with_aux_heads_keeps_every_state_dict_key() -> None:
    import torchvision

    model = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False).eval()
    converted = fxpool.convert(model, torch.randn(1, 3, 96, 96))
    assert converted.state_dict().keys() == model.state_dict().keys()
    assert isinstance(converted, torchvision.models.GoogLeNet)


def test_a_pool_shared_by_a_traced_and_an_untraceable_parent_is_converted_for_both(tmp_path) -> None:
    pool = nn.AdaptiveMaxPool2d(7)

    class Traced(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = pool

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pool(x)

    class Untraceable(Traced):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pool(x * 2) if x.sum() > -1e9 else x

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Traced(), Untraceable()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    model, x = Root(), torch.randn(1, 2, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    (record,) = report_of(converted).records  # one module object: one record of its two calls
    assert record.location == "a.pool" and record.calls == 2
    assert type(converted.b.pool).__name__ == "ExactAdaptivePool" and converted.b.pool is converted.a.pool
    torch.testing.assert_close(converted(x), model(x), **F32)
    assert fxpool.export(model, x, tmp_path / "shared.onnx", dynamo=False).max_abs_error < 1e-5


class AuxHead(nn.Module):
    """Returns an auxiliary output only in train mode, as googlenet and inception do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.aux = nn.Linear(4 * 7 * 7, 2)

    def forward(self, x: torch.Tensor):
        y = self.pool(self.conv(x))
        if self.training:
            return y, self.aux(y.flatten(1))
        return y


class FunctionalDropout(nn.Module):
    """Mode-dependent code inside a submodule: F.dropout reading self.training."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.pool(x), 0.5, training=self.training)


@pytest.mark.parametrize(
    "build",
    [AuxHead, lambda: nn.Sequential(nn.Conv2d(3, 3, 1), FunctionalDropout())],
    ids=["root-branches-on-training", "submodule-reads-training"],
)
def test_code_that_reads_self_training_keeps_following_the_mode(build) -> None:
    model = build().eval()
    x = torch.randn(2, 3, 10, 10)
    converted = fxpool.convert(model, x)
    report = report_of(converted)
    assert len(report.converted) == 1 and not report.unconverted
    for mode in (True, False, True):
        converted.train(mode)
        model.train(mode)
        torch.manual_seed(0)
        got = converted(x)
        torch.manual_seed(0)
        want = model(x)
        assert type(got) is type(want)
        torch.testing.assert_close(got, want, **F32)


class _AreaBySize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=4, mode="area")


@pytest.mark.parametrize(
    "build",
    [lambda: nn.Upsample(size=4, mode="area"), lambda: nn.Sequential(nn.Upsample(size=4, mode="area")), _AreaBySize],
    ids=["root-upsample", "upsample-in-sequential", "interpolate"],
)
def test_an_int_area_size_covers_every_spatial_axis(build) -> None:
    # An int size of interpolate/Upsample is every axis's size: 10x10 -> 4x4, not 4x10.
    model, x = build(), torch.randn(1, 4, 10, 10)
    converted = fxpool.convert(model, x)
    torch.testing.assert_close(converted(x), model(x), rtol=1e-6, atol=1e-6)
    assert report_of(converted).records[0].converted and report_of(converted).check.status == "passed"


def test_a_failed_self_check_that_blames_nothing_undoes_every_replacement(monkeypatch) -> None:
    # A replacement that is wrong where the per-replacement check cannot see it: the result must be
    # the original's function, not the failing conversion.
    from fxpool import checking, replacements

    native_forward = replacements.ExactAdaptivePool.forward
    monkeypatch.setattr(replacements.ExactAdaptivePool, "forward", lambda self, x: native_forward(self, x) + 1)
    monkeypatch.setattr(checking, "_replacement_hook", lambda checks: lambda module, inputs, output: None)
    model, x = nn.AdaptiveAvgPool2d(3), torch.randn(1, 4, 10, 10)
    converted = fxpool.convert(model, x)
    torch.testing.assert_close(converted(x), model(x), rtol=0, atol=0)
    report = report_of(converted)
    assert not report.converted and "no single replacement could be blamed" in report.records[0].reason


class _PlainTensorAttribute(nn.Module):
    """A tensor kept as a plain attribute, not a buffer (timm's CSATv2 does this): torch.fx makes it one."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.scale = torch.tensor([2.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) * self.scale


def test_a_plain_tensor_attribute_read_by_the_graph_keeps_working_and_keys_stay() -> None:
    model, x = _PlainTensorAttribute().eval(), torch.randn(1, 2, 10, 10)
    converted = fxpool.convert(model, x)
    assert report_of(converted).converted and report_of(converted).check.status == "passed"
    torch.testing.assert_close(converted(x), model(x), rtol=1e-6, atol=1e-6)
    assert list(converted.state_dict()) == list(model.state_dict()) == []
    again = fxpool.convert(converted, x)  # copies of the converted model read it too
    torch.testing.assert_close(again.double()(x.double()), model(x).double(), rtol=1e-6, atol=1e-6)
    assert not list(model.buffers())  # the user's module is unchanged


def test_a_converted_max_mean_traces_again_and_keeps_pytorchs_tie_gradients() -> None:
    # The one-ReduceMax form serves inference; under autograd and under a user's own torch.fx trace
    # the two max(dim) steps stay (first maximum in row-major order, as PyTorch).
    model, x = nn.Sequential(nn.AdaptiveMaxPool2d(1)), torch.zeros(1, 2, 3, 3)  # every entry ties
    converted = fxpool.convert(model, x)
    traced = torch.fx.symbolic_trace(converted)
    for run in (converted, traced):
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        run(ours).sum().backward()
        model(theirs).sum().backward()
        assert torch.equal(ours.grad, theirs.grad)
    with torch.no_grad():
        assert torch.equal(traced(x), model(x))


class SharedSqueeze(nn.Module):
    """One squeeze-excitation block (and its pool) shared by every stage, as MONAI's QuickNAT builds it."""

    def __init__(self, output: int = 1) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output)
        self.scale = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squeezed = self.pool(x)
        if x.shape[-1] < 0:  # data-dependent on purpose: torch.fx could not trace it
            return x
        return x * torch.sigmoid(self.scale(squeezed)).mean()


class Stages(nn.Module):
    def __init__(self, output: int = 1) -> None:
        super().__init__()
        shared = SharedSqueeze(output)
        self.stages = nn.ModuleList(nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), shared) for _ in range(3))
        self.down = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = self.down(stage(x))
        return x


def test_one_pool_shared_by_every_stage_at_every_size_is_one_record_of_all_its_calls() -> None:
    model, x = Stages(1).eval(), torch.randn(1, 3, 32, 32)
    converted = fxpool.convert(model, x, strict=True)
    (record,) = report_of(converted).records
    assert record.calls == 3 and record.kind == "mean" and "exact at every size" in record.reason
    torch.testing.assert_close(converted(x), model(x), **F32)


def test_a_shared_pool_that_is_not_exact_at_every_size_gets_one_replacement_per_size() -> None:
    model, x = Stages(3).eval(), torch.randn(1, 3, 32, 32)  # 32->3, 16->3, 8->3: no one plan serves all
    converted = fxpool.convert(model, x, strict=True)
    records = report_of(converted).records
    assert [(r.location, r.input_shape[-1], r.calls) for r in records] == [
        ("stages.0.1.pool#0", 32, 1),
        ("stages.0.1.pool#1", 16, 1),
        ("stages.0.1.pool#2", 8, 1),
    ]
    torch.testing.assert_close(converted(x), model(x), **F32)
    dynamic = fxpool.convert(model, x, dynamic=True, strict=True)  # one form for every size, in one table
    torch.testing.assert_close(dynamic(x), model(x), **F32)
