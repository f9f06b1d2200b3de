"""The self-check: what it compares, and what convert undoes when it fails."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxpool
from fxpool import SelfCheckError, report_of
from fxpool.checking import NOISE_FACTOR, TOLERANCE, compare_outputs, self_check
from fxpool.example import read_example


def wrong_indices(in_size: int, out_size: int, lengths) -> torch.Tensor:
    """Sliding-window indices that all point at the first window: a replacement bug the check must catch."""
    return torch.zeros(out_size, dtype=torch.int64)


def wrong_slice_means(x: torch.Tensor, dim: int, bounds) -> torch.Tensor:
    """Every window's mean taken over the first window: a replacement bug the check must catch."""
    start, end = bounds[0]
    return torch.cat([x.narrow(dim, start, end - start).mean(dim, keepdim=True)] * len(bounds), dim)


class PoolsIntoModelOutput(nn.Module):
    """Pools functionally (so it is traced) and returns a ModelOutput-like OrderedDict subclass."""

    def forward(self, x: torch.Tensor) -> OrderedDict:
        return Pooled(pooled=F.adaptive_avg_pool2d(x, 3))


class Pooled(OrderedDict):
    def __init__(self, pooled: torch.Tensor) -> None:
        super().__init__(pooled=pooled)


torch.utils._pytree.register_pytree_node(Pooled, lambda o: ([o["pooled"]], None), lambda values, _: Pooled(values[0]))


def test_passed_check_states_what_it_compared() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(7), nn.AdaptiveMaxPool2d(4))
    check = report_of(fxpool.convert(model, torch.randn(2, 3, 10, 10))).check
    assert check is not None and check.status == "passed" and not check.actions
    assert [r.location for r in check.replacements] == ["1", "2"]
    assert check.replacements[1].tolerance == 0.0 and check.replacements[1].max_error == 0.0  # max: bit-equal
    assert check.output_error is not None and check.output_error <= check.output_tolerance  # type: ignore[operator]
    assert "against the original's output" in check.summary()


def test_a_wrong_replacement_is_undone_and_reported_with_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fxpool.forms.sliding_window_indices", wrong_indices)
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveAvgPool2d(7), nn.AdaptiveAvgPool2d(3))
    x = torch.randn(2, 3, 10, 10)
    converted = fxpool.convert(model, x)
    report = report_of(converted)
    (undone,) = report.unconverted
    assert undone.location == "1" and "self-check" in undone.reason and "differed from the native pool by" in undone.reason
    assert report.converted[0].location == "2"  # the 7->3 AvgPool slides no window, so it stays
    assert report.check is not None and report.check.status == "passed" and len(report.check.actions) == 1
    torch.testing.assert_close(converted(x), model(x), rtol=1e-6, atol=1e-6)
    with pytest.raises((SelfCheckError, fxpool.UnconvertedPoolError), match="self-check"):
        fxpool.convert(model, x, strict=True)


def test_the_form_exporters_see_is_checked_where_eager_runs_pytorchs_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # General max windows run the native kernel in eager, which cannot disagree with itself; a bug
    # in the gather form (the last window's indices off by one) must still be caught and undone.
    import fxpool.forms as forms

    real = forms.window_gather_indices

    def off_by_one(in_size: int, out_size: int, span: int, zero_padded: bool = False) -> torch.Tensor:
        indices = real(in_size, out_size, span, zero_padded)
        indices[-span:] = 0
        return indices

    monkeypatch.setattr(forms, "window_gather_indices", off_by_one)
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.AdaptiveMaxPool2d(6))
    report = report_of(fxpool.convert(model, torch.randn(1, 3, 33, 33)))
    (undone,) = report.unconverted
    assert undone.location == "1" and "self-check" in undone.reason


def test_a_nondeterministic_model_is_inconclusive_not_undone() -> None:
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(7)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pool(x) + random.random()  # Python's RNG is restored, but a counter is not

    calls = iter(range(1000))

    class Counter(Noisy):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pool(x) + float(next(calls))

    report = report_of(fxpool.convert(Noisy(), torch.randn(1, 2, 10, 10)))
    assert report.check is not None and report.check.status == "passed"  # Python's random is forked too
    report = report_of(fxpool.convert(Counter(), torch.randn(1, 2, 10, 10)))
    assert report.check is not None and report.check.status == "inconclusive"
    assert "not deterministic" in report.check.summary() and report.converted


def test_train_mode_runs_repeat_their_dropout_masks() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.5), nn.AdaptiveAvgPool2d(5)).train()
    check = report_of(fxpool.convert(model, torch.randn(4, 3, 12, 12))).check
    assert check is not None and check.status == "passed"
    assert model[1].num_batches_tracked.item() == 0


def test_compare_outputs_finds_structure_dtype_and_value_differences() -> None:
    a = torch.randn(3, 4)
    assert compare_outputs((a, {"k": 1}), (a.clone(), {"k": 1}))[0] is None
    assert "structures" in compare_outputs(a, (a,))[0]  # type: ignore[operator]
    assert "float64" in compare_outputs(a.double(), a)[0]  # type: ignore[operator]
    assert "differs by" in compare_outputs(a + 1e-3, a)[0]  # type: ignore[operator]
    assert compare_outputs(a + TOLERANCE[torch.float32] / 2, a)[0] is None
    assert "is 2 but" in compare_outputs((a, 2), (a, 3))[0]  # type: ignore[operator]
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    assert compare_outputs(special, special.clone())[0] is None
    assert compare_outputs(special, torch.tensor([0.0, float("inf"), -float("inf"), 1.0]))[0] is not None


def test_self_check_reports_a_converted_model_that_raises() -> None:
    class Raises(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("broken")

    check = self_check(Raises(), read_example(torch.randn(1)), torch.randn(1))
    assert check.status == "failed" and "raised RuntimeError: broken" in (check.mismatch or "")


class TF32Rounding(nn.Module):
    """Rounds float32 to TF32's 10-bit mantissa, as a GPU's TF32 convolutions read their inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bits = x.contiguous().view(torch.int32)
        return ((bits + 0x1000) & -0x2000).view(torch.float32)


@pytest.fixture
def windows_in_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager runs the sliced windows as tracers do (not PyTorch's kernel): a replacement off by rounding."""
    monkeypatch.setattr("fxpool.replacements._WINDOWED_KINDS", ())


def reduced_precision_model() -> nn.Module:
    """A pool, then five convolutions that read TF32: a one-ulp change in a pooled value can flip a rounding,
    and the layers after it spread that flip, as on a GPU with torch.backends.cudnn.allow_tf32 (its default)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, 256, 3, padding=1), nn.AdaptiveAvgPool2d(7)]
    for k in range(5):
        layers += [TF32Rounding(), nn.Conv2d(256, 256, 3, padding=1)] + ([nn.ReLU()] if k < 4 else [])
    model = nn.Sequential(*layers).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3)
    return model


@pytest.mark.usefixtures("windows_in_eager")
def test_the_check_follows_what_the_device_computes_tf32_noise_is_not_blamed_on_the_conversion() -> None:
    model, x = reduced_precision_model(), torch.randn(4, 3, 33, 33)
    converted = fxpool.convert(model, x, strict=True)  # strict: it passed at once, nothing undone
    report = report_of(converted)
    check = report.check
    assert check is not None and check.status == "passed" and not check.actions and report.stands_alone
    assert check.noise is not None and check.output_error is not None and check.output_tolerance is not None
    assert check.output_error > check.output_tolerance  # beyond the float32 bound: the simulated TF32 at work
    assert "sensitivity to rounding" in check.summary()
    with torch.no_grad():
        assert (converted(x) - model(x)).abs().max() <= NOISE_FACTOR * check.noise


@pytest.mark.usefixtures("windows_in_eager")
def test_without_the_noise_floor_tf32_noise_would_undo_every_replacement_and_says_so_loudly(monkeypatch) -> None:
    monkeypatch.setattr("fxpool.checking.NOISE_FACTOR", 0.0)
    model, x = reduced_precision_model(), torch.randn(4, 3, 33, 33)
    report = report_of(fxpool.convert(model, x))
    assert report.check is not None and "EVERY replacement was undone" in report.check.summary()
    assert not report.stands_alone and "NOT standalone" in report.summary()
    with pytest.raises((SelfCheckError, fxpool.UnconvertedPoolError)):
        fxpool.convert(model, x, strict=True)


@pytest.mark.usefixtures("windows_in_eager")
def test_a_wrong_replacement_is_caught_even_where_the_model_is_noisy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fxpool.forms.window_slice_means", wrong_slice_means)  # 33->7: two sliced axes
    model, x = reduced_precision_model(), torch.randn(4, 3, 33, 33)
    report = report_of(fxpool.convert(model, x))
    (undone,) = report.unconverted
    assert "differed from the native pool by" in undone.reason and report.check is not None and report.check.noise is None
