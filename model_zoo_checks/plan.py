"""Which cases a sweep runs and in what order: a :class:`Job` per (model, input shape), the longest first.

A job is plain data (it travels to worker processes and Ray workers as JSON). :func:`jobs` lays out the
sweep in the catalog's order, which is also the order of the report, so two runs of the same sweep
report alike however their cases were scheduled; :func:`longest_first` orders them to run by a cost
estimate (:func:`model_zoo_checks.catalog.cost`), so that the longest cases do not start last and keep one
worker busy after the others have finished. :func:`unswept` names the models reported without running,
each with its reason.

Nothing here imports torch at module level: Ray workers import this module to read their jobs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Job:
    """One case to run: a model at an input shape, with what to check and how many threads it gets."""

    model: str
    input_shape: tuple[int, ...]
    exporters: tuple[str, ...]
    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32",)
    threads: int = 1

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        return (self.model, self.input_shape)

    @property
    def label(self) -> str:
        """``model@HxW``: how the console, the logs and the report name the case."""
        return f"{self.model}@{'x'.join(map(str, self.input_shape[2:]))}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        fields = json.loads(text)
        return cls(
            **fields
            | {
                "input_shape": tuple(fields["input_shape"]),
                "exporters": tuple(fields["exporters"]),
                "dtypes": tuple(fields["dtypes"]),
            }
        )


def log_name(label: str) -> str:
    """The case's log file name (no path separators or colons)."""
    return label.replace("/", "_").replace(":", "_") + ".log"


def jobs(
    names: Sequence[str],
    sizes: Sequence[int] | None,
    with_native: bool,
    settings: dict[str, object],
    fixed_shapes: dict[str, tuple[int, ...]] | None = None,
) -> list[Job]:
    """Every case of these models in the catalog's order (``fixed_shapes``: one shape for the named models).

    ``settings`` holds the Job fields every case shares (exporters, device, dtypes, threads)."""
    from .catalog import input_shapes

    laid_out = []
    for name in names:
        shapes = [fixed_shapes[name]] if fixed_shapes and name in fixed_shapes else input_shapes(name, sizes, with_native)
        laid_out += [Job(name, tuple(shape), **settings) for shape in shapes]  # type: ignore[arg-type]
    return list(dict.fromkeys(laid_out))


def longest_first(laid_out: Sequence[Job], cost: Callable[[str, tuple[int, ...]], float]) -> list[Job]:
    """The jobs by decreasing estimated cost; equal costs keep their order."""
    return sorted(laid_out, key=lambda job: -cost(job.model, job.input_shape))


def unswept(names: Sequence[str], every_model: bool) -> dict[str, str]:
    """The models reported without running, each with its reason: a known limitation, and under
    ``--every-model`` a model that holds no adaptive pool (from the registry census)."""
    from .catalog import NO_POOL, not_swept
    from .registry import entry

    reasons = {}
    for name in names:
        reason = not_swept(name)
        if not reason and every_model:
            found = entry(name)
            reason = "" if found.holds_pool or found.error else NO_POOL
        if reason:
            reasons[name] = reason
    return reasons
