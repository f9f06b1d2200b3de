"""A corpus of small models written the way users write them, for tests/test_idioms.py.

Each :class:`Idiom` names a model builder, the example input's shape, how many adaptive pools
``convert`` must replace and how many it must leave (with a reason), and a second input shape at
which the converted model must either agree with the original or raise an ``FxpoolError``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class Idiom:
    name: str
    build: Callable[[], nn.Module]
    example: tuple[int, ...]
    converted: int  # pools convert must replace
    left: int = 0  # pools convert must leave to PyTorch, each with its reason
    second: tuple[int, ...] | None = None  # default: every spatial axis 3 longer
    train: bool = False  # convert and compare in train mode (same seed on both sides)
    exporters: tuple[str, ...] = ("torchscript",)  # fxpool.export must verify in onnxruntime with each
    why_not_exported: str = ""  # where exporters is empty: what stops the stock exporters too

    def second_shape(self) -> tuple[int, ...]:
        if self.second is not None:
            return self.second
        return self.example[:2] + tuple(s + 3 for s in self.example[2:])


def conv(channels: int = 3) -> nn.Module:
    return nn.Conv2d(channels, channels, 1)


def seq(*modules: nn.Module) -> nn.Module:
    return nn.Sequential(*modules)


class Lambda(nn.Module):
    """A module around a plain function (the function may hold a pool)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class Cat(nn.Module):
    """Runs each branch on the input and concatenates the flattened results (traceable)."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x).flatten(1) for b in self.branches], 1)


class DataBranch(nn.Module):
    """A parent torch.fx cannot trace (it branches on a value) over its children."""

    def __init__(self, *children: nn.Module) -> None:
        super().__init__()
        self.parts = nn.ModuleList(children)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > -1e9:
            return torch.cat([p(x).flatten(1) for p in self.parts], 1)
        return x.flatten(1)


class ExportBranch(nn.Module):
    """smp's PSPNet idiom: a parent that branches on is_in_onnx_export over a ModuleList of blocks."""

    def __init__(self, bins: tuple[int, ...] = (1, 2, 3, 6)) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([seq(nn.AdaptiveAvgPool2d(b), nn.Conv2d(3, 2, 1)) for b in bins])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if torch.onnx.is_in_onnx_export():  # the same function, spelled for the exporter
            h, w = int(h), int(w)
        return torch.cat([x] + [F.interpolate(b(x), size=(h, w), mode="bilinear") for b in self.blocks], 1)


class SPPNet(nn.Module):
    """SPP-net's head: max pools to 1, 2 and 4 in a ModuleList under a data-dependent forward."""

    def __init__(self) -> None:
        super().__init__()
        self.features = conv()
        self.levels = nn.ModuleList([nn.AdaptiveMaxPool2d(s) for s in (1, 2, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        if x.abs().sum() < 0:
            return x
        return torch.cat([level(x).flatten(1) for level in self.levels], 1)


class PoolDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"avg": nn.AdaptiveAvgPool2d(5), "max": nn.AdaptiveMaxPool2d((3, 4))})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > -1e9:
            return torch.cat([self.heads[k](x).flatten(1) for k in sorted(self.heads)], 1)
        return x


class Deep(nn.Module):
    """Untraceable at every level down to ``depth``, with a pool at each level."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3 + depth)
        self.inner = Deep(depth - 1) if depth > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[1] == 3
        y = self.pool(x).flatten(1)
        return y if self.inner is None else torch.cat([y, self.inner(x)], 1)


class GlobalPool(nn.AdaptiveAvgPool2d):
    """A pool subclass whose forward flattens: the override must survive."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).flatten(1)


class ScaledPool(nn.AdaptiveMaxPool2d):
    def __init__(self, size: int, scale: float) -> None:
        super().__init__(size)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


class PlainSubclass(nn.AdaptiveAvgPool2d):
    """A subclass without its own forward: still a pool."""


class Optional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(7)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            x = x * mask
        return self.pool(x)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = seq(conv(), nn.AdaptiveAvgPool2d(7))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


class Stored(nn.Module):
    """Pools reached through functools.partial, a lambda and a stored bound method."""

    def __init__(self) -> None:
        super().__init__()
        self.partial = functools.partial(F.adaptive_avg_pool2d, output_size=7)
        self.bound = self._pool
        self.fn = lambda t: F.adaptive_max_pool2d(t, 4)

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, (2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.partial(x).flatten(1), self.bound(x).flatten(1), self.fn(x).flatten(1)], 1)


class SharedTwoSizes(nn.Module):
    def __init__(self, untraceable: bool) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.untraceable = untraceable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.untraceable and x.sum() < -1e9:
            return x
        return torch.cat([self.pool(x).flatten(1), self.pool(x[..., :8, :8]).flatten(1)], 1)


class TrainBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = seq(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.3))
        self.pool = nn.AdaptiveAvgPool2d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.body(x))


class ScriptedInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scripted = torch.jit.script(seq(conv(), nn.AdaptiveAvgPool2d(7)))
        self.pool = nn.AdaptiveMaxPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.scripted(x))


class TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.AdaptiveAvgPool2d(7)
        self.b = nn.AdaptiveMaxPool2d(5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.a(x), {"max": self.b(x), "sum": self.a(x).sum((-2, -1))}


class ComputedSize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, x.shape[-1] // 2)


class ConcatPool(nn.Module):
    """timm's catavgmax: average and max to the same size, concatenated, flattened."""

    def __init__(self, size: int = 1) -> None:
        super().__init__()
        self.avg = nn.AdaptiveAvgPool2d(size)
        self.max = nn.AdaptiveMaxPool2d(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.avg(x), self.max(x)], 1).flatten(1)


class Unbatched(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x[0], (3, 7)).unsqueeze(0)


class VggHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = seq(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = seq(nn.Linear(8 * 49, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def hooked(kind: str) -> nn.Module:
    """A conv + pool model with one hook of ``kind``; side-effect hooks append to ``model.seen``."""
    model = seq(conv(), nn.AdaptiveAvgPool2d(7), conv())
    seen: list[object] = []
    if kind in ("pool_capture", "inlined_capture", "backward"):
        model.seen = seen  # type: ignore[attr-defined]
    if kind == "pool_forward":
        model[1].register_forward_hook(lambda m, i, o: o * 10)
    elif kind == "pool_pre":
        model[1].register_forward_pre_hook(lambda m, i: (i[0] + 1,))
    elif kind == "pool_capture":
        model[1].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    elif kind == "pool_pre_kwargs":
        model[1].register_forward_pre_hook(lambda m, a, k: ((a[0] * 2,), k), with_kwargs=True)
    elif kind == "root":
        model.register_forward_hook(lambda m, i, o: o + 100)
    elif kind == "inlined_capture":
        model[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    elif kind == "inlined_modify":
        model[2].register_forward_pre_hook(lambda m, i: (i[0].flip(-1),))
    elif kind == "backward":
        model[1].register_full_backward_hook(lambda m, gi, go: seen.append("backward"))
    else:
        raise ValueError(kind)
    return model


def parametrized(kind: str) -> nn.Module:
    layer = nn.Conv2d(3, 3, 1)
    if kind == "weight_norm":
        layer = nn.utils.parametrizations.weight_norm(layer)
    else:
        layer = nn.utils.parametrizations.spectral_norm(layer)
    return seq(layer, nn.AdaptiveAvgPool2d(7)).eval()


def _pool2d(size: object, family: str = "avg") -> nn.Module:
    return nn.AdaptiveAvgPool2d(size) if family == "avg" else nn.AdaptiveMaxPool2d(size)  # type: ignore[arg-type]


IDIOMS: tuple[Idiom, ...] = (
    # spellings
    Idiom("module_matrix", lambda: seq(conv(), nn.AdaptiveAvgPool2d(7)), (2, 3, 10, 10), 1, exporters=("torchscript", "dynamo")),
    Idiom("functional_positional", lambda: Lambda(lambda x: F.adaptive_avg_pool2d(x, 5)), (2, 3, 11, 13), 1),
    Idiom("functional_keyword", lambda: Lambda(lambda x: F.adaptive_avg_pool2d(x, output_size=(3, 4))), (1, 3, 10, 10), 1),
    Idiom("torch_c_nn", lambda: Lambda(lambda x: torch._C._nn.adaptive_avg_pool2d(x, (6, 5))), (1, 3, 13, 11), 1),
    Idiom("max_module", lambda: seq(conv(), nn.AdaptiveMaxPool2d((3, 5))), (2, 3, 10, 11), 1, exporters=("torchscript", "dynamo")),
    Idiom("max_functional_keyword", lambda: Lambda(lambda x: F.adaptive_max_pool2d(x, output_size=4)), (1, 3, 9, 10), 1),
    Idiom(
        "max_return_indices",
        lambda: Lambda(lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True)[0]),
        (1, 3, 10, 10),
        1,
        exporters=("torchscript", "dynamo"),
    ),
    Idiom("pool_1d", lambda: seq(nn.Conv1d(3, 3, 1), nn.AdaptiveAvgPool1d(6)), (2, 3, 13), 1),
    Idiom("max_1d", lambda: nn.AdaptiveMaxPool1d(5), (2, 3, 17), 1),
    Idiom("pool_3d", lambda: nn.AdaptiveAvgPool3d((2, 3, 4)), (1, 2, 5, 7, 9), 1),
    Idiom("interpolate_area_size", lambda: Lambda(lambda x: F.interpolate(x, size=(4, 6), mode="area")), (1, 3, 10, 10), 1),
    Idiom(
        "interpolate_area_scale",
        lambda: Lambda(lambda x: F.interpolate(x, scale_factor=0.25, mode="area")),
        (1, 3, 4, 4),
        1,
        second=(1, 3, 8, 8),
    ),
    Idiom("upsample_area_module", lambda: nn.Upsample(size=(3, 4), mode="area"), (1, 3, 10, 10), 1),
    Idiom("output_larger", lambda: nn.AdaptiveAvgPool2d(16), (1, 2, 5, 5), 1),
    Idiom("output_multiple", lambda: nn.AdaptiveMaxPool2d((8, 10)), (1, 2, 4, 5), 1),
    Idiom("unbatched", Unbatched, (1, 3, 10, 10), 1, exporters=("dynamo",)),
    # the size is an int when the call runs: replaced at the example's, PyTorch's kernel at the others
    Idiom("computed_output_size", ComputedSize, (1, 3, 10, 10), 1, exporters=("dynamo",)),
    # None beside every other axis kind
    Idiom("none_beside_upsample", lambda: nn.AdaptiveAvgPool2d((None, 8)), (1, 2, 5, 4), 1, second=(1, 2, 6, 4)),
    Idiom("none_beside_upsample_max", lambda: nn.AdaptiveMaxPool2d((8, None)), (1, 2, 4, 5), 1, second=(1, 2, 4, 9)),
    Idiom("none_beside_matrix", lambda: nn.AdaptiveAvgPool2d((7, None)), (1, 2, 10, 6), 1),
    Idiom("none_beside_uniform", lambda: nn.AdaptiveAvgPool2d((None, 2)), (1, 2, 5, 6), 1),
    Idiom("none_beside_mean", lambda: nn.AdaptiveAvgPool2d((None, 1)), (1, 2, 5, 6), 1),
    Idiom("none_beside_gather", lambda: nn.AdaptiveMaxPool2d((None, 7)), (1, 2, 5, 10), 1),
    Idiom("none_3d_mixed", lambda: nn.AdaptiveAvgPool3d((None, 7, 1)), (1, 2, 4, 10, 6), 1),
    Idiom("none_3d_upsample", lambda: nn.AdaptiveMaxPool3d((None, 6, None)), (1, 2, 4, 3, 5), 1, second=(1, 2, 6, 3, 7)),
    # subclasses
    Idiom("subclass_plain", lambda: seq(conv(), PlainSubclass(7)), (1, 3, 10, 10), 1),
    Idiom("subclass_flatten_forward", lambda: seq(conv(), GlobalPool(1)), (2, 3, 7, 7), 1),
    Idiom("subclass_scaled_forward", lambda: seq(conv(), ScaledPool(4, 0.5)), (2, 3, 9, 9), 1),
    # hooks
    Idiom("hook_pool_forward", lambda: hooked("pool_forward"), (1, 3, 10, 10), 1),
    Idiom("hook_pool_pre", lambda: hooked("pool_pre"), (1, 3, 10, 10), 1),
    Idiom("hook_pool_capture", lambda: hooked("pool_capture"), (1, 3, 10, 10), 1),
    Idiom("hook_pool_pre_kwargs", lambda: hooked("pool_pre_kwargs"), (1, 3, 10, 10), 1),
    Idiom("hook_root", lambda: hooked("root"), (1, 3, 10, 10), 1),
    Idiom("hook_inlined_capture", lambda: hooked("inlined_capture"), (1, 3, 10, 10), 1),
    Idiom("hook_inlined_modify", lambda: hooked("inlined_modify"), (1, 3, 10, 10), 1),
    Idiom("hook_backward", lambda: hooked("backward"), (1, 3, 10, 10), 1),
    # containers and untraceable parents
    Idiom("modulelist_traced", lambda: Cat(*[nn.AdaptiveAvgPool2d(s) for s in (1, 2, 3, 6)]), (1, 3, 13, 13), 4),
    Idiom("modulelist_untraceable_spp", SPPNet, (1, 3, 13, 13), 3),
    Idiom("moduledict_untraceable", PoolDict, (1, 3, 11, 10), 2),
    Idiom(
        "nested_sequential",
        lambda: seq(seq(conv(), seq(nn.AdaptiveAvgPool2d(7), conv())), nn.AdaptiveMaxPool2d(3)),
        (1, 3, 10, 10),
        2,
    ),
    Idiom("export_branch_pyramid", ExportBranch, (1, 3, 20, 20), 4),
    Idiom("untraceable_depth_1", lambda: Deep(1), (1, 3, 10, 10), 1),
    Idiom("untraceable_depth_3", lambda: Deep(3), (1, 3, 10, 10), 3),
    Idiom(
        "data_branch_mixed",
        lambda: DataBranch(seq(conv(), nn.AdaptiveAvgPool2d(7)), Cat(nn.AdaptiveMaxPool2d(3), GlobalPool(2))),
        (1, 3, 10, 10),
        3,
    ),
    Idiom("shared_two_sizes_traced", lambda: SharedTwoSizes(False), (1, 2, 10, 10), 2),
    Idiom("shared_two_sizes_untraceable", lambda: SharedTwoSizes(True), (1, 2, 10, 10), 2),
    # the rest of real code
    Idiom("optional_argument", Optional, (1, 3, 10, 10), 1),
    Idiom("checkpoint", Checkpointed, (1, 3, 10, 10), 1),
    Idiom(
        "data_parallel",
        lambda: nn.DataParallel(seq(conv(), nn.AdaptiveAvgPool2d(7))),
        (1, 3, 10, 10),
        1,
        exporters=(),
        why_not_exported="torch.onnx refuses DataParallel itself: export model.module",
    ),
    Idiom("stored_callables", Stored, (1, 3, 10, 10), 3),
    Idiom("weight_norm", lambda: parametrized("weight_norm"), (1, 3, 10, 10), 1),
    Idiom("spectral_norm", lambda: parametrized("spectral_norm"), (1, 3, 10, 10), 1, exporters=("dynamo",)),
    Idiom(
        "train_mode_dropout_bn",
        TrainBlock,
        (4, 3, 12, 12),
        1,
        train=True,
        exporters=(),
        why_not_exported="exported in train mode, dropout makes onnxruntime and PyTorch differ by design",
    ),
    Idiom(
        "scripted_submodule",
        ScriptedInside,
        (1, 3, 10, 10),
        1,
        left=1,
        exporters=(),
        why_not_exported="torch.onnx cannot trace a scripted submodule of a Python module, the original neither",
    ),
    Idiom("tuple_and_dict_output", TupleOut, (1, 3, 10, 10), 2, exporters=("torchscript", "dynamo")),  # a: one module, two calls
    Idiom("concat_avg_max", lambda: seq(conv(), ConcatPool(3)), (2, 3, 10, 10), 2),
    Idiom("vgg_head", VggHead, (1, 3, 20, 20), 1, second=(1, 3, 14, 14), exporters=("torchscript", "dynamo")),
)
