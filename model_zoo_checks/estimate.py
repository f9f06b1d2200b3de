"""How long a whole registry's sweep takes, estimated from a slice that ran: core-seconds, and the cluster for an hour.

Each case's worker records its CPU time (``cpu_seconds``: every thread of it, onnxruntime's included), which
load on the machine changes far less than wall time. Over the slice's cases that ran, a least-squares line
``seconds = fixed + per_cost x cost`` (cost: :func:`model_zoo_checks.catalog.cost`, parameters x input
elements) is fitted; summed over every case the suite's ``--every-model`` sweep would run (each model of the
registry census that holds a pool, at the sizes the sweep gives it) it is the whole sweep's core time. The
cores that run it in an hour: that time over an hour, rounded up, and no fewer than the longest case needs
(a case runs on one core); longest-first scheduling keeps the last hour's cores busy. Cases that alone
take more than an hour on one core are counted: they need ``--threads`` (more cores per case) to fit.

``python -m model_zoo_checks.estimate REPORT_DIR_OR_FILE --suite timm`` prints it; the docs render the same
from the kept slice (``tables.render("estimate", ...)``).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOUR_S = 3600.0


@dataclass(frozen=True)
class Estimate:
    """A slice's fit and what it predicts for the registry."""

    slice_cases: int
    slice_core_s: float
    fixed_s: float  # per case, whatever the model
    per_cost_s: float  # per unit of cost (parameters x input elements)
    registry_models: int
    registry_cases: int
    registry_core_s: float
    longest_case_s: float
    longest_case: str
    cores_for_an_hour: int  # the whole time over an hour, rounded up
    over_an_hour: int  # cases that alone take more than an hour on one core


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x`` over (x, y) points; a flat line at the mean where x does not vary."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope


def estimate(cases: Sequence[dict[str, Any]], suite: str) -> Estimate:
    """Fit the slice's cases of ``suite`` and extrapolate to the suite's whole registry (models with a pool)."""
    from .catalog import cost, every_name, input_shapes, suite_of
    from .registry import entry

    ran = [c for c in cases if suite_of(c["model"]) == suite and c.get("cpu_seconds") and c["status"] != "skip"]
    if len(ran) < 2:
        raise ValueError(f"the report holds {len(ran)} {suite} cases with a CPU time: nothing to fit (run the sweep first)")
    fixed, per_cost = fit([(cost(c["model"], tuple(c["input_shape"])), c["cpu_seconds"]) for c in ran])
    models = [name for name in every_name([suite]) if entry(name).holds_pool]
    predicted = [
        (max(fixed + per_cost * cost(name, shape), 0.0), f"{name} {'x'.join(map(str, shape))}")
        for name in models
        for shape in input_shapes(name, None, with_native=True)
    ]
    total = sum(seconds for seconds, _ in predicted)
    longest, which = max(predicted)
    return Estimate(
        slice_cases=len(ran),
        slice_core_s=sum(c["cpu_seconds"] for c in ran),
        fixed_s=fixed,
        per_cost_s=per_cost,
        registry_models=len(models),
        registry_cases=len(predicted),
        registry_core_s=total,
        longest_case_s=longest,
        longest_case=which,
        cores_for_an_hour=max(math.ceil(total / HOUR_S), 1),
        over_an_hour=sum(seconds > HOUR_S for seconds, _ in predicted),
    )


def markdown(found: Estimate, suite: str) -> str:
    hours = found.registry_core_s / HOUR_S
    tail = (
        f" {found.over_an_hour} cases alone take more than an hour on one core (the longest, {found.longest_case}, about "
        f"{found.longest_case_s / HOUR_S:.1f} h): they fit the hour only with more threads each (--threads)."
        if found.over_an_hour
        else f" The longest case, {found.longest_case}, takes about {found.longest_case_s / 60:.0f} minutes."
    )
    return (
        f"Measured: {found.slice_cases} {suite} cases of the slice took {found.slice_core_s / 60:.0f} core-minutes "
        f"(the workers' CPU time), {found.slice_core_s / found.slice_cases:.0f} s a case on average. Fitted over them: "
        f"{found.fixed_s:.1f} s a case plus {found.per_cost_s * 1e12:.1f} s per 10¹² (parameters × input elements). "
        f"The whole registry, {found.registry_models} {suite} models with an adaptive pool at their own size and a "
        f"second ({found.registry_cases} cases): about **{hours:.0f} core-hours** "
        f"({found.registry_core_s / found.registry_cases:.0f} s a case): in an hour on **{found.cores_for_an_hour} cores**, "
        f"one case per core.{tail}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from .tables import load_cases

    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.estimate", description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path, help="report folders or kept reports")
    parser.add_argument("--suite", default="timm")
    args = parser.parse_args(argv)
    print(markdown(estimate(load_cases(args.sources), args.suite), args.suite), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
