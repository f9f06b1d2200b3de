"""Models that break the process they run in, on purpose: the sweep's isolation is proven on them.

Names are ``fault/KIND``; no suite lists them, so only ``--models fault/...`` (and the tests) sweep them.
Each builds a small module whose forward does what its name says when the case first runs it:

- ``fault/sigsegv``, ``fault/sigfpe``: the process kills itself with that signal, as a crash in C++ code
  would (the TorchScript exporter dies of SIGFPE on a zero batch);
- ``fault/sleep``: the forward never returns (the case's time limit ends it);
- ``fault/memory``: the forward keeps allocating (the case's memory limit ends it);
- ``fault/once-sigsegv``: dies of SIGSEGV on the first attempt only (a marker file in ``FXPOOL_ZOO_CASE_DIR``,
  the folder the attempts of a case share, remembers it), then runs as a small pooled net: a crash a retry survives.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

PREFIX = "fault/"
KINDS = ("sigsegv", "sigfpe", "sleep", "memory", "once-sigsegv")


class _Pooled(nn.Module):
    """A convolution and an adaptive pool: a model fxpool converts, once the fault has passed."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.pool = nn.AdaptiveAvgPool2d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x))


class Fault(_Pooled):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind in ("sigsegv", "sigfpe"):
            os.kill(os.getpid(), signal.SIGSEGV if self.kind == "sigsegv" else signal.SIGFPE)
        elif self.kind == "sleep":
            while True:
                time.sleep(1)
        elif self.kind == "memory":
            hoard = []
            while True:
                hoard.append(torch.ones(64 * 2**20, dtype=torch.uint8))  # 64 MiB at a time, touched
        elif self.kind == "once-sigsegv":
            marker = Path(os.environ.get("FXPOOL_ZOO_CASE_DIR", tempfile.gettempdir())) / "once-sigsegv"
            if not marker.exists():
                marker.touch()
                os.kill(os.getpid(), signal.SIGSEGV)
        return super().forward(x)


def names() -> list[str]:
    return [PREFIX + kind for kind in KINDS]


def shapes(name: str, chosen: list[int] | None) -> list[tuple[int, ...]]:
    return [(1, 3, s, s) for s in (chosen or [16])]


def build(name: str, shape: tuple[int, ...] | None = None) -> nn.Module:
    kind = name[len(PREFIX) :]
    if kind not in KINDS:
        raise ValueError(f"unknown fault {name!r}: one of {', '.join(names())}")
    return Fault(kind).eval()
