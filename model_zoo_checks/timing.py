"""Side-by-side timing: contenders alternate within every repeat, and each reports its median."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def side_by_side(
    contenders: dict[str, Callable[[], object]], repeats: int, warmup: int = 3, device: str = "cpu", sample_s: float = 2e-3
) -> dict[str, float]:
    """Median seconds per call of each contender, alternating them within every repeat.

    Each sample runs a contender enough times back to back to last about ``sample_s`` (the count
    is set from the warm-up), so that sub-millisecond cases are not lost in timer noise; on the
    GPU, CUDA events time the sample.
    """
    calls = {}
    for name, run in contenders.items():
        for _ in range(warmup):
            once = _time_calls(run, 1, device)
        calls[name] = max(1, int(sample_s / max(once, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            samples[name].append(_time_calls(run, calls[name], device) / calls[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def _time_calls(run: Callable[[], object], calls: int, device: str) -> float:
    if device.startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    start_s = time.perf_counter()
    for _ in range(calls):
        run()
    return time.perf_counter() - start_s
