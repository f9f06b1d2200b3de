"""The ``blocks`` benchmark section: the block form against the pool, for pools whose windows tile every axis.

Per case (family, spatial rank, stride, size), ``fxpool.convert`` of the pool exported by the TorchScript exporter
twice, its ONNX form forced each way (:data:`fxpool.planning.BLOCK_MIN_LENGTHS` at 1, or past every length): the
block form (per axis a Reshape and one reduction) and the pool (one AveragePool or MaxPool; a 1d or 3d average as
2d ones, :func:`fxpool.forms.avg_pool_as_2d`), timed side by side in onnxruntime at one thread, with the planner's
pick. The data the thresholds are fitted to.
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock

import torch
from torch import nn

import fxpool
from fxpool import forms, planning
from fxpool.steps import BlockReduceStep

from .options import ort_sessions
from .timing import side_by_side

# (family, leading axes, output size, strides): windows of each stride tile every axis of output * stride entries
CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = [
    ("avg", (8, 64), (50,), (8, 12, 16, 24)),
    ("avg", (64, 64), (100,), (8, 16)),
    ("avg", (1, 512), (7, 7), (8, 12, 16)),
    ("avg", (4, 512), (7, 7), (8, 16)),
    ("avg", (1, 64), (7, 7), (12, 16)),
    ("avg", (2, 64), (3, 7, 7), (4, 6, 8)),
    ("avg", (1, 64), (2, 2, 2), (6, 8, 12)),
    ("avg", (1, 16), (2, 7, 7), (6, 8)),
    ("max", (8, 64), (50,), (4, 8, 12)),
    ("max", (64, 64), (100,), (8,)),
    ("max", (1, 512), (7, 7), (6, 8, 12)),
    ("max", (4, 512), (7, 7), (4, 8)),
    ("max", (1, 64), (7, 7), (8,)),
    ("max", (2, 64), (3, 7, 7), (2, 3, 4, 6)),
    ("max", (1, 64), (2, 2, 2), (2, 3, 4, 6)),
]

HEADER = (
    "\n| pool | stride | pool ms | blocks ms | blocks / pool | picked | 1d/3d AveragePool / pool |\n|---|---|---|---|---|---|---|\n"
)


@contextlib.contextmanager
def forced(form: str) -> Iterator[None]:
    """The planner's block threshold at 1 (``blocks``) or past every length (``pool``, ``pool_nd``), for every rank
    and family; ``pool_nd`` exports 1d and 3d averages as ONNX's own AveragePool, not as 2d ones."""
    length = 1 if form == "blocks" else 1 << 30
    with (
        mock.patch.dict(planning.BLOCK_MIN_LENGTHS, {key: length for key in planning.BLOCK_MIN_LENGTHS}),
        mock.patch.object(forms, "averages_as_2d", lambda dims: False) if form == "pool_nd" else contextlib.nullcontext(),
    ):
        yield


def _pool(family: str, output: tuple[int, ...]) -> nn.Module:
    return getattr(nn, f"Adaptive{family.capitalize()}Pool{len(output)}d")(output)


def block_case(family: str, shape: tuple[int, ...], output: tuple[int, ...], repeats: int, workdir: str) -> dict[str, Any]:
    """One case: both forms' onnxruntime time (one thread, seconds) and the form the planner picks."""
    x = torch.randn(shape)
    paths = {}
    for form in ("pool", "blocks") + (("pool_nd",) if family == "avg" and len(output) != 2 else ()):
        with forced(form), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = fxpool.convert(_pool(family, output), x)
            paths[form] = f"{workdir}/{form}.onnx"
            torch.onnx.export(converted, (x,), paths[form], dynamo=False, input_names=["x"])
    sessions = ort_sessions(paths, threads=1)
    array = x.numpy()
    times = side_by_side({form: (lambda s=s: s.run(None, {"x": array})) for form, s in sessions.items()}, repeats)
    plan = planning.choose_plan(family, tuple(shape[-len(output) :]), output)
    picked = "blocks" if any(isinstance(step, BlockReduceStep) for step in plan.onnx_steps) else "pool"
    return {f"{form}_s": seconds for form, seconds in times.items()} | {"picked": picked}


def blocks_section(
    repeats: int, cases: Sequence[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = CASES
) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for family, lead, output, strides in cases:
            for stride in strides:
                shape = (*lead, *(size * stride for size in output))
                row: dict[str, Any] = {"family": family, "shape": list(shape), "output": list(output), "stride": stride}
                row.update(block_case(family, shape, output, repeats, workdir))
                rows.append(row)
                print(block_line(row), flush=True)
    return rows


def block_line(row: dict[str, Any]) -> str:
    label = f"{row['family']} {'x'.join(map(str, row['shape']))} → {'x'.join(map(str, row['output']))}"
    return (
        f"| {label} | {row['stride']} | {row['pool_s'] * 1e3:.3f} | {row['blocks_s'] * 1e3:.3f} "
        f"| {row['blocks_s'] / row['pool_s']:.2f} | {row['picked']} "
        + (f"| {row['pool_nd_s'] / row['pool_s']:.2f} |" if "pool_nd_s" in row else "| - |")
    )
