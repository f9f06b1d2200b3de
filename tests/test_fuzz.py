"""A differential fuzzer: random small networks, converted, against the originals.

Each network stacks a few blocks on a 1d, 2d or 3d input (channels-last for some, float32 or float64):
convolutions, activations, adaptive pools of both families as modules or as functional calls in a
forward of their own, down-sampling, up-sampling, ``None`` entries, several pools in a row, a branch
that pools and is added back. The converted model must equal the original on the example and on
an input holding NaN and ±inf (positions compared: :func:`assert_same_positions`), in eager, in the
form tracers see (:func:`fxpool.sizechecks.traced_forms`) and as a ``torch.export`` program; every
fifth network also through the TorchScript ONNX exporter and onnxruntime, on another finite input
(onnxruntime's own convolutions and MaxPool treat NaN and ±inf in their own ways). Anything else is a
silent difference and fails.

``make test`` runs :data:`DEFAULT_BUDGET` networks from a fixed seed; ``--runslow`` runs
:data:`SLOW_BUDGET` more. Tolerances: float32 rtol=atol=1e-5 (1e-4 in onnxruntime, after several
convolutions), float64 1e-10; max pools after the same arithmetic bit for bit in eager.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxpool
from fxpool.sizechecks import traced_forms

DEFAULT_BUDGET = 40
SLOW_BUDGET = 2000
CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
FAMILIES_AND_DIMS = [(family, dims) for family in ("avg", "max") for dims in (1, 2, 3)]
POOL_MODULES = {(f, d): getattr(nn, f"Adaptive{f.capitalize()}Pool{d}d") for f, d in FAMILIES_AND_DIMS}
POOL_FUNCTIONS = {(f, d): getattr(F, f"adaptive_{f}_pool{d}d") for f, d in FAMILIES_AND_DIMS}


class FunctionalPool(nn.Module):
    """A forward of its own that pools functionally, its output size positional or keyword."""

    def __init__(self, family: str, output_size: tuple[int | None, ...], keyword: bool) -> None:
        super().__init__()
        self.family, self.output_size, self.keyword = family, output_size, keyword

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = POOL_FUNCTIONS[self.family, len(self.output_size)]
        return pool(x, output_size=self.output_size) if self.keyword else pool(x, self.output_size)


class PoolAndAddBack(nn.Module):
    """A branch that pools, is pooled back to its input's size by an adaptive average, and is added on."""

    def __init__(self, pool: nn.Module, size: tuple[int, ...]) -> None:
        super().__init__()
        self.pool, self.size = pool, size
        self.back = POOL_MODULES["avg", len(size)](size)  # not interpolate: its ONNX export rounds another way

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.back(self.pool(x))


@dataclass(frozen=True)
class Network:
    model: nn.Module
    example: torch.Tensor
    description: str


def random_network(rng: random.Random) -> Network:
    dims = rng.choice((1, 2, 2, 3))
    limit = {1: 40, 2: 24, 3: 9}[dims]
    input_sizes = [rng.randint(1, limit) for _ in range(dims)]
    sizes = list(input_sizes)  # the spatial sizes at the current layer
    in_channels = channels = rng.randint(1, 4)
    dtype = rng.choice((torch.float32, torch.float64))
    layers: list[nn.Module] = []
    words = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(("conv", "relu", "pool", "pool", "functional", "branch"))
        words.append(kind)
        if kind == "conv":
            out_channels = rng.randint(1, 4)
            layers.append(CONV[dims](channels, out_channels, 3, padding=1))
            channels = out_channels
            continue
        if kind == "relu":
            layers.append(nn.ReLU())
            continue
        family = rng.choice(("avg", "max"))
        requested: list[int | None] = []
        for axis in range(dims):
            if dims > 1 and rng.random() < 0.15:
                requested.append(None)
            elif rng.random() < 0.2:
                requested.append(sizes[axis] * rng.randint(2, 3))  # up-sampling by a whole factor
            else:
                requested.append(rng.randint(1, limit + 4))
        output = tuple(requested)
        if kind == "branch":
            layers.append(PoolAndAddBack(POOL_MODULES[family, dims](output), tuple(sizes)))
            continue
        layers.append(
            FunctionalPool(family, output, rng.random() < 0.5) if kind == "functional" else POOL_MODULES[family, dims](output)
        )
        sizes = [s if r is None else r for s, r in zip(sizes, output)]
    model = nn.Sequential(*layers).to(dtype).eval()
    batch = rng.choice((1, 1, 2, 2, 0, None))  # None: an unbatched input
    x = torch.randn(((batch,) if batch is not None else ()) + (in_channels, *input_sizes), dtype=dtype)
    if dims > 1 and batch is not None and rng.random() < 0.3:
        x = x.contiguous(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
    return Network(model, x, f"{dims}d {dtype} {' '.join(words)} input {tuple(x.shape)}")


def assert_same_positions(ours: torch.Tensor, theirs: torch.Tensor, tolerance: float) -> None:
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    assert torch.equal(torch.isposinf(ours), torch.isposinf(theirs)) and torch.equal(torch.isneginf(ours), torch.isneginf(theirs))
    finite = torch.isfinite(theirs)
    torch.testing.assert_close(ours[finite], theirs[finite], rtol=tolerance, atol=tolerance)


def with_non_finite(x: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """A copy of ``x`` with NaN, +inf or -inf at one to three random positions (its layout kept)."""
    flat = x.detach().clone().contiguous()
    if not flat.numel():
        return flat
    for _ in range(rng.randint(1, 3)):
        flat.view(-1)[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), float("-inf")])
    return flat.contiguous(memory_format=torch.channels_last) if not x.is_contiguous() and x.dim() == 4 else flat


def check_network(index: int, seed: int) -> None:
    rng = random.Random(seed * 100_003 + index)
    torch.manual_seed(seed * 100_003 + index)
    network = random_network(rng)
    model, x = network.model, network.example
    expected = model(x)
    tolerance = 1e-10 if x.dtype == torch.float64 else 1e-5
    converted = fxpool.convert(model, x, strict=True)
    assert_same_positions(converted(x), expected, tolerance)
    with traced_forms():
        assert_same_positions(converted(x), expected, tolerance)
    bad = with_non_finite(x, rng)
    assert_same_positions(converted(bad), model(bad), tolerance)
    with traced_forms():
        assert_same_positions(converted(bad), model(bad), tolerance)
    program = torch.export.export(converted, (x,))
    assert_same_positions(program.module()(x), expected, tolerance)
    if index % 5 == 0 and x.dtype == torch.float32:
        assert fxpool.report_of(converted).stands_alone
        # finite values: onnxruntime's convolutions and MaxPool treat NaN and infinities in their own ways
        # (MaxPool skips NaN; an infinity through a convolution can come out as -3.4e38), the stock graph's
        # as fxpool's; tests/test_beyond_the_example.py puts NaN and ±inf through every pool form alone
        other = torch.randn(x.shape)
        for dynamo in (False, True):
            if not dynamo and 0 in x.shape:
                continue  # an empty input under the TorchScript exporter: refused (tests/test_proving.py)
            check_standalone_export(converted, x, other, model(other), f"/tmp/fxpool-fuzz-{seed}-{index}-{dynamo}.onnx", dynamo)


def check_standalone_export(
    converted: nn.Module, x: torch.Tensor, other: torch.Tensor, expected: torch.Tensor, path: str, dynamo: bool
) -> None:
    """A model the report says stands alone: plain torch.onnx.export of it holds no adaptive pool op and matches."""
    import onnx

    from fxpool.verifying import run_onnxruntime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (x,), path, dynamo=dynamo, **({"verbose": False, "external_data": False} if dynamo else {}))
    assert not [n.op_type for n in onnx.load(path).graph.node if "daptive" in n.op_type]
    (out,) = run_onnxruntime(path, (other,))
    assert_same_positions(torch.from_numpy(out), expected, 1e-4)


@pytest.mark.parametrize("index", range(DEFAULT_BUDGET))
def test_random_networks(index: int) -> None:
    check_network(index, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(SLOW_BUDGET))
def test_random_networks_slow(index: int) -> None:
    check_network(index, seed=1)
