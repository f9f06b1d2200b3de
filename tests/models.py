"""Small hand-written models for the conversion tests: every spelling, and untraceable shapes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EverySpelling(nn.Module):
    """Each way of writing an adaptive average pool, at sizes that need each replacement kind."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.module_2d = nn.AdaptiveAvgPool2d((7, 7))
        self.module_none = nn.AdaptiveAvgPool2d((None, 3))
        self.module_1d = nn.AdaptiveAvgPool1d(4)
        self.module_3d = nn.AdaptiveAvgPool3d((1, 2, 3))
        self.upsample_area = nn.Upsample(size=(3, 4), mode="area")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x))  # (N, 4, 10, 10)
        parts = [
            self.module_2d(x),  # 10 -> 7: sliding windows
            self.module_none(x),  # (None, 3): identity x pooling
            F.adaptive_avg_pool2d(x, 5),  # 10 -> 5: pooling
            F.adaptive_avg_pool2d(x, output_size=(2, 20)),  # keyword; 10 -> 20 upsample
            torch._C._nn.adaptive_avg_pool2d(x, (1, 1)),  # mean
            F.adaptive_avg_pool1d(x.flatten(2), 3),
            torch.adaptive_avg_pool1d(x.flatten(2), 6),
            self.module_1d(x.flatten(2)),
            self.module_3d(x.unsqueeze(1)),
            F.adaptive_avg_pool3d(x.unsqueeze(1), (2, None, 4)),
            torch._C._nn.adaptive_avg_pool3d(x.unsqueeze(1), 3),
            F.interpolate(x, size=(4, 6), mode="area"),
            F.interpolate(x, scale_factor=0.5, mode="area"),
            self.upsample_area(x),
        ]
        unbatched = F.adaptive_avg_pool2d(x[0], (3, 3)).reshape(1, -1).expand(x.shape[0], -1)
        return torch.cat([p.flatten(1) for p in parts] + [unbatched], dim=1)


class ShapeBranch(nn.Module):
    """A forward torch.fx cannot trace: it branches on a size and asserts on another."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.head = PooledHead()
        self.pool = nn.AdaptiveAvgPool2d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[1] == 3, "needs RGB"
        x = self.stem(x)
        if x.shape[-1] > 8:
            x = x * 2
        direct = F.adaptive_avg_pool2d(x, 5)  # unreachable: this forward does not trace
        return torch.cat([self.head(x), self.pool(x).flatten(1), direct.flatten(1)], dim=1)


class PooledHead(nn.Module):
    """A traceable child with a functional pool."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.proj(x), (3, 7)).flatten(1)


class SharedPool(nn.Module):
    """One pool module called on two sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.pool(x).flatten(1), self.pool(x[..., :8, :8]).flatten(1)], 1)


class UntraceableShared(nn.Module):
    """A shared pool module inside an untraceable forward, called on two sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > -1e9:
            return torch.cat([self.pool(x).flatten(1), self.pool(x[..., :8, :8]).flatten(1)], 1)
        return x.flatten(1)


class MaxAndIndices(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, indices = F.adaptive_max_pool2d(x, 3, return_indices=True)
        return values.flatten(1) + indices.flatten(1).float()


class WithDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.drop(self.bn(x)), 7)


class ExportBranch(nn.Module):
    """The same pool module in both branches, and an area interpolate under export only."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            return self.pool(x) + F.interpolate(x, size=(4, 4), mode="area")
        return self.pool(x) * 2


class IndicesHead(nn.Module):
    """A pool fxpool leaves to PyTorch under ``dynamic=True`` (its argmax indices are asked for, a form
    specialised to one size) and no stock exporter takes with dynamic spatial axes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.pool = nn.AdaptiveMaxPool2d(7, return_indices=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x))[0]
