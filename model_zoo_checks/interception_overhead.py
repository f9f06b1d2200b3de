"""What intercepting functional pool calls costs in eager (CPU): per pool call, per block, per model.

``python -m model_zoo_checks.interception_overhead`` times, with one thread, in alternating rounds
(the median of each):

- a module whose forward makes a squeeze-excite pool (``F.adaptive_avg_pool2d(x, 1)``), original and
  converted, beside the native pool and its replacement alone: what interception adds per pool call is
  (converted - original) - (replacement - native);
- entering and leaving the mode, and ten other ops with and without it: what each other torch call of
  an intercepted forward (its submodules' too) pays;
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


def pool_call(shape: tuple[int, ...], calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per call: the original module and the converted one (whose forward is intercepted), the
    native pool and the replacement alone, and what interception adds per pool call: (converted - original)
    - (replacement - native)."""
    x = torch.randn(shape)
    original = _SqueezePool()
    converted = fxpool.convert(original, x, strict=True)
    assert isinstance(converted.forward, InterceptingForward)
    replacement = converted.fxpool_calls.replacements["0"]
    converted(x)  # the mode is made on the first call
    mode = converted.forward._mode
    assert mode is not None

    def ten_ops_in_mode() -> None:
        with mode:
            for _ in range(10):
                x.neg()

    def ten_ops() -> None:
        for _ in range(10):
            x.neg()

    def enter_and_leave() -> None:
        with mode:
            pass

    with torch.no_grad():
        timings = _median_us(
            {
                "original module (native pool)": lambda: original(x),
                "converted module (intercepted)": lambda: converted(x),
                "native F.adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(x, 1),
                "replacement alone": lambda: replacement(x),
                "mode entered and left": enter_and_leave,
                "10 other ops": ten_ops,
                "10 other ops inside the mode": ten_ops_in_mode,
            },
            calls,
            rounds,
        )
    timings["interception per pool call (derived)"] = (
        timings["converted module (intercepted)"] - timings["original module (native pool)"]
    ) - (timings["replacement alone"] - timings["native F.adaptive_avg_pool2d"])
    inside = timings["10 other ops inside the mode"] - timings["mode entered and left"]
    timings["mode per other op (derived)"] = (inside - timings["10 other ops"]) / 10
    return timings


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
    for shape in ((1, 32, 112, 112), (1, 1152, 7, 7), (1, 8, 4, 4)):
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
