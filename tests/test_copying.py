"""fxpool.copying: module-tree copies over shared tensors, installed graphs, paths and hooks."""

from __future__ import annotations

import copy

import torch
from torch import nn

from fxpool.copying import carry_hooks, export_graph_of, graph_of, has_hooks, install_graph, module_paths, structural_copy


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


def test_install_graph_keeps_class_state_dict_and_moves_with_the_module() -> None:
    model = structural_copy(_model().eval())
    keys = list(model.state_dict())
    gm = torch.fx.symbolic_trace(model)
    install_graph(model, gm)
    assert type(model) is nn.Sequential and list(model.state_dict()) == keys
    assert graph_of(model) is gm and graph_of(_model()) is None
    x = torch.randn(1, 3, 2, 3)
    torch.testing.assert_close(model(x), gm(x))
    model.double()  # what the graph reads moves with the module
    assert model(x.double()).dtype == torch.float64


def test_module_paths_list_every_name_of_a_shared_module() -> None:
    model = _model()
    paths = module_paths(model)
    assert paths[id(model[2][0])] == ["2.0", "2.1"] and paths[id(model)] == [""]


def test_hooks_are_found_and_carried() -> None:
    source, target = nn.Identity(), nn.Identity()
    seen = []
    source.register_forward_hook(lambda module, inputs, output: seen.append(module))
    assert has_hooks(source) and not has_hooks(target)
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


def test_a_module_with_an_export_branch_pickles_and_deep_copies_with_its_own_graphs() -> None:
    import io

    import fxpool

    model, x = ExportBranch().eval(), torch.randn(1, 3, 10, 10)
    converted = fxpool.convert(model, x, strict=True)
    assert export_graph_of(converted) is not None
    buffer = io.BytesIO()
    torch.save(converted, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-6)
    clone = copy.deepcopy(converted)
    with torch.no_grad():
        clone.conv.weight.zero_()  # the clone's graphs read the clone's weights, not the original's
    assert not torch.equal(clone(x), converted(x))
    torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-6)
