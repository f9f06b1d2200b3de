"""The converted model stands on its own: every pool replaced wherever it is called from, both branches
of code that asks ``torch.onnx.is_in_onnx_export()``, and plain exports exact with no fxpool code around.

Each model here is written the way a library the users build on writes it (smp's PSPBlock, transformers'
UperNet pyramid, a ModelOutput return); the exports are plain ``torch.onnx.export`` (both exporters) and
``torch.export.export`` of the converted model, checked against the original in onnxruntime or eagerly.
Tolerance: float32, rtol 1e-5 and atol 1e-5 (only the pools differ, each exact up to the order of its sums).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from graphs import data_dependent_ops
from torch import nn

import fxpool
from fxpool import symbolics
from fxpool.verifying import op_histogram, run_onnxruntime

RTOL = ATOL = 1e-5


class PSPBlock(nn.Module):
    """smp 0.6's PSPBlock: the pool module in eager, an area interpolate under ONNX export."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(size), nn.Conv2d(4, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2:]
        if torch.onnx.is_in_onnx_export():
            x = F.interpolate(x, size=(self.size, self.size), mode="area")
            x = self.pool[1](x)
        else:
            x = self.pool(x)
        return F.interpolate(x, size=(h, w), mode="bilinear", align_corners=True)


class PSPNet(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (1, 2, 3, 6)) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.blocks = nn.ModuleList(PSPBlock(s) for s in sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return torch.cat([x] + [block(x) for block in self.blocks], 1)


class ListPyramid(nn.Module):
    """transformers' UperNet pyramid: blocks registered with add_module and called through a plain list,
    each block's own layers kept the same way; here the forward is also untraceable (data-dependent)."""

    def __init__(self, sizes: tuple[int, ...] = (1, 2, 3, 6), traceable: bool = True) -> None:
        super().__init__()
        self.traceable = traceable
        self.blocks = []
        for i, size in enumerate(sizes):
            block = _ListBlock(size)
            self.blocks.append(block)
            self.add_module(str(i), block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.traceable and x.shape[-1] < 2:  # a shape-dependent branch: torch.fx cannot trace it, torch.export can
            return x
        return torch.cat([F.interpolate(block(x), size=x.shape[2:], mode="bilinear") for block in self.blocks], 1)


class _ListBlock(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.layers = [nn.AdaptiveAvgPool2d(size), nn.Conv2d(3, 2, 1), nn.BatchNorm2d(2)]
        for i, layer in enumerate(self.layers):
            self.add_module(str(i), layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class UnregisteredPools(nn.Module):
    """Pools that are never registered: kept in a plain list and a dict, called from untraceable code."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        object.__setattr__(self, "pools", [nn.AdaptiveAvgPool2d(3), nn.AdaptiveMaxPool2d(4)])
        object.__setattr__(self, "by_name", {"wide": nn.AdaptiveAvgPool2d((2, 5))})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if x.shape[-1] < 2:  # torch.fx cannot trace this branch
            return x.flatten(1)
        parts = [pool(x).flatten(1) for pool in self.pools] + [self.by_name["wide"](x).flatten(1)]
        return torch.cat(parts, 1)


def _plain_onnx(model: nn.Module, x: torch.Tensor, dynamo: bool, path: str) -> dict[str, int]:
    torch.onnx.export(model, (x,), path, dynamo=dynamo, verbose=False)
    return op_histogram(path)


@pytest.fixture
def no_fxpool_at_export_time(monkeypatch):
    """Fail if any of fxpool's exporter translations is asked for: plain exports must not need them."""

    def refuse(*args, **kwargs):
        raise AssertionError("fxpool's exporter translations were used")

    monkeypatch.setattr(symbolics, "exporter_translations", refuse)
    monkeypatch.setattr(symbolics, "dynamo_translation_table", refuse)


MODELS = {
    "psp-export-branch": (PSPNet, (1, 3, 20, 20), 8),
    "list-pyramid": (ListPyramid, (1, 3, 10, 10), 4),
    "list-pyramid-untraceable": (lambda: ListPyramid(traceable=False), (1, 3, 10, 10), 4),
    "unregistered": (UnregisteredPools, (1, 3, 10, 10), 3),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_pool_is_replaced_and_plain_onnx_exports_are_exact(name: str, tmp_path, no_fxpool_at_export_time) -> None:
    build, shape, pools = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(shape)
    if name.startswith("psp"):  # the stock TorchScript exporter fails on the export branch's area pool
        with pytest.raises(Exception, match="adaptive_avg_pool2d|not factor"):
            torch.onnx.export(model, (x,), str(tmp_path / "stock.onnx"), dynamo=False)
    converted = fxpool.convert(model, x, strict=True)
    report = fxpool.report_of(converted)
    assert len(report.records) == pools and report.stands_alone, str(report)
    assert "exports exactly on its own" in report.summary()
    expected = model(x)
    torch.testing.assert_close(converted(x), expected, rtol=RTOL, atol=ATOL)
    for dynamo in (False, True):
        path = str(tmp_path / f"plain-{dynamo}.onnx")
        ops = _plain_onnx(converted, x, dynamo, path)
        assert not data_dependent_ops(path), ops
        (got,) = run_onnxruntime(path, (x,))
        torch.testing.assert_close(torch.from_numpy(got), expected, rtol=RTOL, atol=ATOL)
    program = torch.export.export(converted, (x,))
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert not {t for t in targets if "adaptive" in t}, targets
    torch.testing.assert_close(program.module()(x), expected, rtol=RTOL, atol=ATOL)


def test_the_export_branch_is_recorded_converted_and_checked_beside_the_eager_one() -> None:
    model = PSPNet().eval()
    report = fxpool.explain(model, torch.randn(1, 3, 20, 20))
    eager = [r for r in report.records if not r.export_branch]
    export = [r for r in report.records if r.export_branch]
    assert [r.op for r in eager] == ["nn.AdaptiveAvgPool2d"] * 4
    assert [r.op for r in export] == ["F.interpolate(mode='area')"] * 4
    assert all(r.location.endswith("@export") and r.converted for r in export)
    assert report.check is not None and report.check.status == "passed"
    assert "is_in_onnx_export() true" in report.check.compared


class _OnePercentOff(nn.Module):
    """A replacement that is wrong by 1%, presenting itself to the self-check as the one it wraps."""

    def __init__(self, exact: nn.Module) -> None:
        super().__init__()
        self.exact = exact
        self.location = exact.location
        self.fxpool_native_reference = exact.fxpool_native_reference

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.exact(x) * 1.01


def test_a_wrong_replacement_in_the_export_branch_is_caught_by_the_self_check(monkeypatch) -> None:
    from fxpool import building

    original = building.replacement_module

    def wrong_in_one_export_branch(chosen, event, device):
        module = original(chosen, event, device)
        if chosen.site.export_branch and chosen.site.location.startswith("blocks.2"):
            return _OnePercentOff(module)
        return module

    monkeypatch.setattr(building, "replacement_module", wrong_in_one_export_branch)
    report = fxpool.explain(PSPNet().eval(), torch.randn(1, 3, 20, 20))
    undone = [r for r in report.records if not r.converted]
    assert [r.location for r in undone] == ["blocks.2:F.interpolate(mode='area')#0@export"], str(report)
    assert "self-check" in undone[0].reason and not report.stands_alone
    assert "NOT standalone" in report.summary()


class FailsUnderExport(nn.Module):
    """An export branch that cannot run in eager: the eager calls are converted, the export stays the model's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            raise RuntimeError("only for the exporter")
        return F.adaptive_avg_pool2d(x, 3)


def test_an_export_branch_that_cannot_be_recorded_fails_under_export_as_the_original_does(tmp_path) -> None:
    model, x = nn.Sequential(nn.Conv2d(3, 3, 1), FailsUnderExport()).eval(), torch.randn(1, 3, 10, 10)
    converted = fxpool.convert(model, x, strict=True)  # nothing is traced, so nothing of that branch is lost
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="only for the exporter"):
        torch.onnx.export(converted, (x,), str(tmp_path / "fails.onnx"), dynamo=False)


def test_list_held_modules_are_never_run_on_the_callers_model() -> None:
    model = ListPyramid(traceable=False).train()  # batch-norm in train mode updates running stats when run
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fxpool.convert(model, torch.randn(2, 3, 10, 10))
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_a_pool_held_in_a_list_beside_its_registered_name_is_swapped_in_both() -> None:
    model = ListPyramid().eval()
    converted = fxpool.convert(model, torch.randn(1, 3, 10, 10))
    for block in (converted.get_submodule(str(i)) for i in range(4)):
        assert block.layers[0] is block.get_submodule("0")
        assert type(block.layers[0]).__name__ == "ExactAdaptivePool"
    assert all(type(block.layers[0]) is nn.AdaptiveAvgPool2d for block in model.blocks)  # the caller's untouched


@dataclass
class Output(OrderedDict):
    """A transformers-style ModelOutput: a dataclass over an OrderedDict, registered as a pytree."""

    logits: torch.Tensor | None = None
    pooled: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for key in ("logits", "pooled"):
            if getattr(self, key) is not None:
                self[key] = getattr(self, key)


torch.utils._pytree.register_pytree_node(
    Output,
    lambda o: (list(o.values()), list(o.keys())),
    lambda values, keys: Output(**dict(zip(keys, values))),
)


class ReturnsModelOutput(nn.Module):
    """Pools functionally (intercepted at run time) and returns a ModelOutput."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> Output:
        pooled = F.adaptive_avg_pool2d(self.conv(x), 3)
        return Output(logits=pooled.flatten(1).sum(1), pooled=pooled)


def test_a_model_output_class_survives_conversion() -> None:
    model = ReturnsModelOutput().eval()
    x = torch.randn(1, 3, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    report = fxpool.report_of(converted)
    assert report.intercepted == ("",) and report.check is not None and not report.check.actions, str(report)
    out = converted(x)
    assert type(out) is Output and out.pooled.shape == (1, 4, 3, 3)
    torch.testing.assert_close(out.logits, model(x).logits, rtol=RTOL, atol=ATOL)
