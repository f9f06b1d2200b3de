"""What intercepting functional pool calls costs in eager (CPU): per pool call, per block, per model.

``python -m model_zoo_checks.interception_overhead`` times, with one thread, in alternating rounds
(the median of each):

- a squeeze-excite pool (``F.adaptive_avg_pool2d(x, 1)``) called natively, its replacement called
  directly, and the same call made inside an intercepted forward (the mode's lookup and the replacement);
- entering and leaving the mode around one other op, and that op alone (what every call of an
  intercepted forward pays, the mode's frame included);
- one efficientnet_pytorch MBConvBlock and the whole EfficientNet-b0 at 224, original against converted
  (where efficientnet_pytorch is installed: ``pip install ".[thirdparty]"``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import fxpool
from fxpool.intercepting import InterceptingForward


def _median_us(functions: dict[str, Callable[[], object]], calls: int, rounds: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for function in functions.values():
        for _ in range(max(calls // 10, 3)):
            function()
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(calls):
                function()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


class _SqueezePool(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 1)


class _OneOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.neg()


def pool_call(shape: tuple[int, ...], calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per pool call: native, the replacement alone, and through an intercepted forward."""
    x = torch.randn(shape)
    converted = fxpool.convert(_SqueezePool(), x, strict=True)
    assert isinstance(converted.forward, InterceptingForward)
    replacement = converted.fxpool_calls.replacements["0"]
    plain_op = fxpool.convert(torch.nn.Sequential(_OneOp(), _SqueezePool()), x, strict=True)
    with torch.no_grad():
        return _median_us(
            {
                "native F.adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(x, 1),
                "replacement called directly": lambda: replacement(x),
                "intercepted forward (mode + lookup + replacement)": lambda: converted(x),
                "one other op alone": lambda: x.neg(),
                "one other op in an intercepted forward's mode": lambda: plain_op[0](x),
            },
            calls,
            rounds,
        )


def efficientnet(size: int, calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per forward of one MBConvBlock and of EfficientNet-b0, original and converted."""
    from efficientnet_pytorch import EfficientNet

    torch.manual_seed(0)
    model = EfficientNet.from_name("efficientnet-b0").eval()
    x = torch.randn(1, 3, size, size)
    converted = fxpool.convert(model, x, strict=True)
    block, converted_block = model._blocks[1], converted._blocks[1]
    with torch.no_grad():
        inner = model._swish(model._bn0(model._conv_stem(x)))
        inner = model._blocks[0](inner)
        timings = _median_us(
            {"MBConvBlock original": lambda: block(inner), "MBConvBlock converted": lambda: converted_block(inner)},
            calls,
            rounds,
        )
        timings.update(
            _median_us(
                {"EfficientNet-b0 original": lambda: model(x), "EfficientNet-b0 converted": lambda: converted(x)},
                max(calls // 50, 3),
                rounds,
            )
        )
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, dict[str, float]] = {}
    for shape in ((1, 32, 112, 112), (1, 240, 28, 28), (1, 1152, 7, 7)):
        results[f"pool call {shape}"] = pool_call(shape, options.calls, options.rounds)
    try:
        results["efficientnet_pytorch b0, 224"] = efficientnet(224, options.calls // 4, options.rounds)
    except ImportError:
        pass
    for name, timings in results.items():
        print(name)
        for what, us in timings.items():
            print(f"  {what:<55} {us:9.2f} us")
    print(json.dumps({"torch": torch.__version__, "threads": 1, "results": results}))


if __name__ == "__main__":
    main()
