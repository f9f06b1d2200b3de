"""fxpool.copying: module-tree copies over shared tensors, rebound methods, paths and hooks."""

from __future__ import annotations

import copy
import types

import torch
import torch.nn.functional as F
from torch import nn

from fxpool.copying import carry_hooks, structural_copy, tree_index


def _model() -> nn.Sequential:
    shared = nn.Linear(3, 3)
    return nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Sequential(shared, shared))


def test_structural_copy_shares_parameters_and_copies_module_objects() -> None:
    model = _model()
    copied = structural_copy(model)
    assert copied is not model and copied[0] is not model[0]
    assert copied[0].weight is model[0].weight and copied[1].running_mean is model[1].running_mean
    assert copied[2][0] is copied[2][1]  # a module shared in the original stays shared in the copy
    copied[0].new_attribute = 1
    assert not hasattr(model[0], "new_attribute")


def test_cloned_buffers_leave_the_original_statistics_alone() -> None:
    model = _model().train()
    before = model[1].running_mean.clone()
    copied = structural_copy(model, clone_buffers=True)
    copied(torch.randn(4, 3, 2, 3))
    assert torch.equal(model[1].running_mean, before) and not torch.equal(copied[1].running_mean, before)
    assert copied[0].weight is model[0].weight  # parameters are still shared


def _pooled_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return self.pool(self.conv(x))


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.pool = nn.AdaptiveAvgPool2d((5, 7))


def test_a_forward_bound_on_the_instance_is_bound_to_the_copy() -> None:
    model = nn.Sequential(Wrapper())
    model[0].forward = types.MethodType(_pooled_forward, model[0])
    copied = structural_copy(model)
    assert copied[0].forward.__self__ is copied[0] and model[0].forward.__self__ is model[0]


def test_a_converted_model_with_a_forward_bound_on_the_instance_runs_its_own_modules() -> None:
    import fxpool

    model = Wrapper().eval()
    model.forward = types.MethodType(_pooled_forward, model)
    x = torch.randn(1, 3, 13, 11)
    converted = fxpool.convert(model, x, strict=True)
    assert converted.forward.__self__ is converted
    report = fxpool.report_of(converted)
    assert [(r.location, r.converted) for r in report.records] == [("pool", True)]
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-6)


def test_module_paths_list_every_name_of_a_shared_module() -> None:
    model = _model()
    paths = tree_index(model)[1]
    assert paths[id(model[2][0])] == ["2.0", "2.1"] and paths[id(model)] == [""]


def test_hooks_are_found_and_carried() -> None:
    source, target = nn.Identity(), nn.Identity()
    seen = []
    source.register_forward_hook(lambda module, inputs, output: seen.append(module))
    assert source._forward_hooks and not target._forward_hooks
    carry_hooks(source, target)
    target(torch.ones(1))
    assert seen == [target]


class ExportBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if torch.onnx.is_in_onnx_export():
            return torch.nn.functional.interpolate(x, size=(4, 4), mode="area")
        return torch.nn.functional.adaptive_avg_pool2d(x, 4)


class Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.conv(x), (5, 7))


def test_an_intercepted_forward_pickles_deep_copies_and_copies_with_its_module() -> None:
    import io

    import fxpool

    model, x = Functional().eval(), torch.randn(1, 3, 13, 11)
    converted = fxpool.convert(model, x, strict=True)
    buffer = io.BytesIO()
    torch.save(converted, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.forward.owner is loaded and loaded.forward.calls is loaded.fxpool_calls
    torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-6)
    clone = copy.deepcopy(converted)
    assert clone.forward.owner is clone and clone.forward.calls is clone.fxpool_calls
    with torch.no_grad():
        clone.conv.weight.zero_()  # the clone runs the clone's weights, not the original's
    assert not torch.equal(clone(x), converted(x))
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-6)
    structural = structural_copy(converted)
    assert structural.forward.owner is structural and structural.forward.calls is structural.fxpool_calls
