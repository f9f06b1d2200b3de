"""The sweep's results as they arrive: one JSON line per finished case in ``REPORT/cases.jsonl``.

The driver appends each case the moment its worker is done (and flushes it to disk), so a run killed at
any point loses no finished case; ``--resume`` reads the journal back and runs only what it lacks. A
line cut short by the kill is ignored, and where a case appears twice the later line wins. A journal is
begun anew for each run with the cases it keeps from the last (:func:`begin`), written under a temporary
name and renamed, so a kill during that leaves the old journal whole.

Records are plain dicts (the :class:`~model_zoo_checks.zoo.Case` fields); reports from before the
journal are read from their ``report.json`` instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

JOURNAL = "cases.jsonl"
Key = tuple[str, tuple[int, ...]]


def key(record: dict[str, Any]) -> Key:
    return (record["model"], tuple(record["input_shape"]))


def read(folder: Path) -> list[dict[str, Any]]:
    """The finished cases recorded in ``folder`` (its journal, else its report.json), one per case."""
    path = folder / JOURNAL
    if not path.is_file():
        report = folder / "report.json"
        return json.loads(report.read_text()) if report.is_file() else []
    found: dict[Key, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed run, cut short
            continue
        found[key(record)] = record
    return list(found.values())


def begin(folder: Path, kept: Iterable[dict[str, Any]]) -> None:
    """Start the journal of a run with the cases it keeps (none for a fresh run)."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / (JOURNAL + ".tmp")
    temporary.write_text("".join(json.dumps(record) + "\n" for record in kept))
    os.replace(temporary, folder / JOURNAL)


def append(folder: Path, record: dict[str, Any]) -> None:
    """Add one finished case, on disk before this returns."""
    with open(folder / JOURNAL, "a") as journal:
        journal.write(json.dumps(record) + "\n")
        journal.flush()
        os.fsync(journal.fileno())
