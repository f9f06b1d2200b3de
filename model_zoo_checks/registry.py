"""The registry census: every model the suites' libraries register, whether it holds an adaptive pool, its
declared input size and its parameter count.

``--every-model`` sweeps whole registries (every timm architecture, every pytorchcv model, every
transformers vision model type, torchvision's ``list_models()``). Which of them hold an adaptive pool,
and how long each will take, is known only by building them; building 2,400 models takes minutes
(timm's 1,371 about 5 on one core, on the meta device), so the answers are kept in ``registry.json``
beside this module, for the library versions it records. The sweep reads it to leave out the models
with nothing to convert (reported as skips, with that reason) and to order the cases by cost, the
longest first. A name the file lacks (another library version) is censused when first asked.

``python -m model_zoo_checks.registry [--suite timm pytorchcv ...]`` rewrites the suites' entries from
the installed libraries; a slow test checks that the file covers them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import io
import json
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("registry.json")
# The library each censused suite's names come from (its version is recorded beside the entries).
LIBRARIES = {"torchvision": "torchvision", "timm": "timm", "pytorchcv": "pytorchcv", "transformers": "transformers"}


@dataclass(frozen=True)
class Entry:
    """What building one model told: its parameters, whether it holds an adaptive pool, its input size."""

    params: int
    holds_pool: bool
    size: tuple[int, int] | None = None  # the input (height, width) the library declares; None where none
    error: str = ""  # why it cannot be built ("" where it can)


@functools.cache
def census(path: Path = PATH) -> dict[str, Entry]:
    """The census kept in ``path`` (empty where there is none)."""
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())["models"]
    return {name: Entry(row[0], row[1], tuple(row[2]) if row[2] else None, row[3]) for name, row in rows.items()}  # type: ignore[misc]


def entry(name: str) -> Entry:
    """The model's census entry: from the file, or by building it now."""
    found = census().get(name)
    return found if found is not None else take(name)


def take(name: str) -> Entry:
    """Build the model (on the meta device where its builder allows) and note what it holds."""
    import torch

    from . import catalog

    try:
        with _quiet():
            try:
                with torch.device("meta"):  # nothing is allocated
                    model = catalog.build(name)
            except Exception:  # a few builders read tensor values while initialising
                model = catalog.build(name)
    except Exception as error:
        return Entry(0, False, None, f"{type(error).__name__}: {error}"[:300])
    return Entry(sum(p.numel() for p in model.parameters()), catalog.holds_a_pool(model), catalog.declared_size(name, model))


@contextlib.contextmanager
def _quiet():
    """Builders print and warn (deprecated names, missing optional packages): not the census's output."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def write(suites: Sequence[str], path: Path = PATH) -> dict[str, int]:
    """Census every model of ``suites`` into ``path`` (other suites' entries kept); models per suite."""
    from . import catalog

    kept = json.loads(path.read_text()) if path.is_file() else {"versions": {}, "models": {}}
    counts = {}
    for suite in suites:
        names = catalog.every_name([suite])
        kept["models"] = {n: row for n, row in kept["models"].items() if catalog.suite_of(n) != suite}
        for name in names:
            found = take(name)
            kept["models"][name] = [found.params, found.holds_pool, list(found.size) if found.size else None, found.error]
        kept["versions"][suite] = importlib.metadata.version(LIBRARIES[suite])
        counts[suite] = len(names)
    kept["models"] = dict(sorted(kept["models"].items()))
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(kept, indent=0, separators=(",", ":")) + "\n")
    os.replace(temporary, path)  # a reader never sees half a file
    census.cache_clear()
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.registry", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", nargs="+", choices=list(LIBRARIES), default=list(LIBRARIES))
    args = parser.parse_args(argv)
    for suite, n in write(args.suite).items():
        print(f"{suite}: {n} models censused into {PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
