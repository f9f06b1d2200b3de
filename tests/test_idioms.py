"""The corpus of user idioms (tests/idioms.py), and random models composed from the same pieces.

Every case asserts: the converted model equals the original at the example size; at a second
size it equals it or raises an ``FxpoolError`` (never a silent wrong answer); the report counts
the pools the model holds and its self-check passed; the caller's model and the random state are
untouched; and, where it exports, ``fxpool.export`` verifies in onnxruntime.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from graphs import data_dependent_ops
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from idioms import IDIOMS, Cat, DataBranch, ExportBranch, GlobalPool, Idiom, ScaledPool, conv
from torch import nn
from torch.utils._pytree import tree_leaves

import fxpool
from fxpool import FxpoolError, report_of
from fxpool.copying import structural_copy

# Converted against original in float32: both round every layer alike, only the pools differ.
RTOL, ATOL = 1e-5, 1e-5


def run(model: nn.Module, x: torch.Tensor, seed: int = 7) -> Any:
    """``model(x)`` on a copy with cloned buffers, from a fixed seed, so train-mode runs repeat."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return structural_copy(model, clone_buffers=True)(x)


def assert_same(ours: Any, theirs: Any) -> None:
    ours_leaves, theirs_leaves = tree_leaves(ours), tree_leaves(theirs)
    assert len(ours_leaves) == len(theirs_leaves)
    for a, b in zip(ours_leaves, theirs_leaves):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def snapshot(model: nn.Module) -> dict[str, Any]:
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "training": {n: m.training for n, m in model.named_modules()},
        "hooks": {n: (len(m._forward_hooks), len(m._forward_pre_hooks)) for n, m in model.named_modules()},
        "rng": torch.get_rng_state(),
    }


def assert_untouched(model: nn.Module, before: dict[str, Any]) -> None:
    after = snapshot(model)
    assert after["training"] == before["training"] and after["hooks"] == before["hooks"]
    assert after["state"].keys() == before["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(after["state"][key], value), key
    assert torch.equal(after["rng"], before["rng"])


def check_idiom(
    model: nn.Module, example: torch.Tensor, second: torch.Tensor, converted_pools: int | None, left_pools: int = 0
) -> nn.Module:
    """The assertions every case makes; returns the converted model."""
    before = snapshot(model)
    converted = fxpool.convert(model, example)
    assert_untouched(model, before)
    report = report_of(converted)
    if converted_pools is not None:
        assert len(report.converted) == converted_pools, str(report)
        assert len(report.unconverted) == left_pools, str(report)
    assert all(r.reason for r in report.unconverted)
    assert report.check is not None and report.check.status in ("passed", "skipped"), str(report)
    assert_same(run(converted, example), run(model, example))
    try:
        expected = run(model, second)
    except Exception:  # the original itself does not run at that size: nothing to compare
        return converted
    try:
        got = run(converted, second)
    except FxpoolError:
        return converted
    assert_same(got, expected)
    return converted


@pytest.mark.parametrize("idiom", IDIOMS, ids=lambda i: i.name)
def test_idiom(idiom: Idiom, tmp_path: Any) -> None:
    model = idiom.build().train(idiom.train)
    example, second = torch.randn(idiom.example), torch.randn(idiom.second_shape())
    seen = getattr(model, "seen", None)
    converted = check_idiom(model, example, second, idiom.converted, idiom.left)
    if seen is not None:  # side-effect hooks fire on the converted model's calls
        count = len(seen)
        x = example.clone().requires_grad_()
        converted(x).sum().backward()
        assert len(seen) > count
    assert idiom.exporters or idiom.why_not_exported
    before = snapshot(model)
    for exporter in idiom.exporters:
        result = fxpool.export(model, example, str(tmp_path / f"{idiom.name}-{exporter}.onnx"), dynamo=exporter == "dynamo")
        assert result.max_abs_error is not None and result.max_abs_error < 1e-4
        report = report_of(converted)
        # the window argmax form (max pools returning indices) selects by value: its Where and GatherElements are its own
        if not report.unconverted and not any(r.kind == "argmax" for r in report.records):
            assert not data_dependent_ops(result.path), result.op_histogram
    assert_untouched(model, before)
    if report_of(converted).stands_alone and "torchscript" in idiom.exporters and not idiom.train:
        assert_plain_export_matches(converted, model, example, tmp_path / f"{idiom.name}-plain.onnx")


def assert_plain_export_matches(converted: nn.Module, model: nn.Module, example: torch.Tensor, path: Any) -> None:
    """The report's claim, checked: a model that stands alone exports by plain torch.onnx.export (no fxpool code
    around the call) to a graph with no adaptive pool op that matches onnxruntime."""
    import warnings

    import onnx

    from fxpool.verifying import run_onnxruntime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (example,), str(path), dynamo=False)
    assert not [n.op_type for n in onnx.load(str(path)).graph.node if "daptive" in n.op_type]
    outputs = run_onnxruntime(str(path), (example,))
    expected = [leaf for leaf in tree_leaves(run(model, example)) if isinstance(leaf, torch.Tensor)]
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("idiom", IDIOMS, ids=lambda i: i.name)
def test_idiom_with_an_empty_batch(idiom: Idiom) -> None:
    """Batch 0: where the original runs on it, the conversion converts it and torch.export of the result runs."""
    model = idiom.build().eval()
    empty = torch.randn(idiom.example)[:0]
    try:
        with torch.no_grad():
            expected = model(empty)
    except Exception as error:
        pytest.skip(f"the original does not run on an empty batch: {type(error).__name__}")
    converted = fxpool.convert(model, empty)
    report = report_of(converted)
    assert report.check is not None and report.check.status in ("passed", "skipped"), str(report)
    with torch.no_grad():
        assert_same(converted(empty), expected)
        if "dynamo" in idiom.exporters:  # the idioms torch.export can capture at all
            program = torch.export.export(converted, (empty,))
            assert_same(program.module()(empty), expected)


def test_the_corpus_covers_at_least_forty_idioms() -> None:
    assert len(IDIOMS) >= 40 and len({i.name for i in IDIOMS}) == len(IDIOMS)


def test_meta_example_converts_for_the_weights_device() -> None:
    model = nn.Sequential(conv(), nn.AdaptiveAvgPool2d(7), nn.AdaptiveMaxPool2d(4))
    converted = fxpool.convert(model, torch.randn(1, 3, 10, 10, device="meta"))
    check = report_of(converted).check
    assert check is not None and check.status == "skipped" and "meta" in check.compared
    x = torch.randn(2, 3, 10, 10)
    assert_same(converted(x), model(x))


def test_meta_model_and_example_rebuild_constants_on_to_empty() -> None:
    model = nn.Sequential(conv(), nn.AdaptiveAvgPool2d(7), nn.AdaptiveMaxPool2d(4)).to("meta")
    converted = fxpool.convert(model, torch.randn(1, 3, 10, 10, device="meta")).to_empty(device="cpu")
    original = model.to_empty(device="cpu")
    weights = {k: torch.randn_like(v) for k, v in original.state_dict().items()}
    original.load_state_dict(weights)
    converted.load_state_dict(weights)
    x = torch.randn(2, 3, 10, 10)
    assert_same(converted(x), original(x))


@pytest.mark.cuda
def test_cuda_example() -> None:
    model = nn.Sequential(conv(), nn.AdaptiveAvgPool2d(7), nn.AdaptiveMaxPool2d(4)).cuda()
    example = torch.randn(2, 3, 10, 10, device="cuda")
    converted = check_idiom(model, example, torch.randn(2, 3, 13, 13, device="cuda"), 2)
    assert report_of(converted).check.status == "passed"  # type: ignore[union-attr]


def test_scripted_root_is_refused_with_what_to_pass() -> None:
    with pytest.raises(fxpool.UnsupportedModelError, match="Pass the Python nn.Module"):
        fxpool.convert(torch.jit.script(nn.Sequential(conv(), nn.AdaptiveAvgPool2d(3))), torch.randn(1, 3, 7, 7))


def test_scripted_submodule_pool_is_reported() -> None:
    from idioms import ScriptedInside

    (record,) = report_of(fxpool.convert(ScriptedInside(), torch.randn(1, 3, 10, 10))).unconverted
    assert record.location == "scripted.1" and "TorchScript" in record.reason


# --- random models composed from the corpus's pieces ---

POOL_SIZES = st.one_of(
    st.integers(1, 9),
    st.tuples(st.one_of(st.none(), st.integers(1, 9)), st.one_of(st.none(), st.integers(1, 9))),
)


@st.composite
def branches(draw: st.DrawFn) -> tuple[nn.Module, int]:
    """One branch: a pool (of some family, size, class and hook) inside some container."""
    family = draw(st.sampled_from(["avg", "max"]))
    size = draw(POOL_SIZES)
    kind = draw(st.sampled_from(["plain", "flatten_subclass", "scaled_subclass", "functional"]))
    if kind == "flatten_subclass" and family == "avg":
        pool: nn.Module = GlobalPool(size)
    elif kind == "scaled_subclass" and family == "max":
        pool = ScaledPool(size if isinstance(size, int) else 3, 2.0)
    elif kind == "functional":
        fn = F.adaptive_avg_pool2d if family == "avg" else F.adaptive_max_pool2d
        pool = _Functional(fn, size)
    else:
        pool = nn.AdaptiveAvgPool2d(size) if family == "avg" else nn.AdaptiveMaxPool2d(size)
    hook = draw(st.sampled_from(["none", "forward", "pre"]))
    if hook == "forward":
        pool.register_forward_hook(lambda m, i, o: o * 3)
    elif hook == "pre":
        pool.register_forward_pre_hook(lambda m, i: (i[0] - 1,))
    container = draw(st.sampled_from(["bare", "sequential", "cat", "nested"]))
    if container == "sequential":
        pool = nn.Sequential(conv(), pool)
    elif container == "cat":
        pool = Cat(pool)
    elif container == "nested":
        pool = nn.Sequential(nn.Sequential(pool))
    return pool, 1


class _Functional(nn.Module):
    def __init__(self, fn: Any, size: Any) -> None:
        super().__init__()
        self.fn, self.size = fn, size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, self.size)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(branches(), min_size=1, max_size=3),
    parent=st.sampled_from(["cat", "data_branch"]),
    height=st.integers(3, 12),
    width=st.integers(3, 12),
    batch=st.integers(1, 2),
    grow=st.integers(1, 3),
)
def test_random_composed_models(
    parts: list[tuple[nn.Module, int]], parent: str, height: int, width: int, batch: int, grow: int
) -> None:
    modules = [m for m, _ in parts]
    model = Cat(*modules) if parent == "cat" else DataBranch(*modules)
    example = torch.randn(batch, 3, height, width)
    second = torch.randn(batch, 3, height + grow, width + grow)
    converted = check_idiom(model.eval(), example, second, converted_pools=None)
    assert report_of(converted).converted  # every piece holds a pool that can be replaced


def test_export_branch_pyramid_exports_the_export_path() -> None:
    # Under export the parent takes its other branch; the converted model must follow it there too.
    model = ExportBranch()
    converted = fxpool.convert(model, torch.randn(1, 3, 20, 20))
    assert len(report_of(converted).converted) == 4
