"""MkDocs hook: result tables rendered at build time from the JSON reports in docs/data/.

A page writes ``<!-- fxpool-table: zoo data/zoo-torchvision.json "Title" -->`` (or ``bench FILE``,
``runtimes FILE``) where a table belongs; the hook replaces the marker with what
:mod:`model_zoo_checks.tables` renders from that file, so the pages cannot drift from the runs.
A marker naming a missing file fails the (strict) build.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from model_zoo_checks import tables  # noqa: E402 (after the path it needs)

MARKER = re.compile(r"<!-- fxpool-table: (.+?) -->")


def render(arguments: str) -> str:
    kind, path, *rest = shlex.split(arguments)
    return tables.render(kind, ROOT / "docs" / path, *rest)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' hook signature)
    return MARKER.sub(lambda match: render(match.group(1)), markdown)
