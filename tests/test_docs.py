"""Every code block of the README and of docs/ runs as written.

Python blocks run in a fresh folder (they write their .onnx files there); shell blocks run each command:
``fxpool ...`` through the command line, ``make TARGET`` as a dry run (``make -n``) that must name a real
target. ``text`` blocks are output, not code. The docs build itself (``make docs``, strict) is CI's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, int, str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            language, code = match.group(1), match.group(2)
            if language in ("python", "bash"):
                line = text[: match.start()].count("\n") + 1
                found.append((str(page.relative_to(ROOT)), line, language, code))
    return found


BLOCKS = blocks()


def test_the_pages_have_code_to_run() -> None:
    assert {page for page, *_ in BLOCKS} >= {"README.md", "docs/guide.md", "docs/cli.md"}


@pytest.mark.parametrize("page,line,language,code", BLOCKS, ids=[f"{p}:{n}" for p, n, *_ in BLOCKS])
def test_every_code_block_runs_as_written(page: str, line: int, language: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if language == "python":
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{page}:{line}\n{run.stderr[-3000:]}"
        return
    for command in (c for c in code.splitlines() if c.strip() and not c.startswith("#")):
        words = shlex.split(command, comments=True)
        if words[0] == "make":
            run = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
        elif words[0] == "fxpool":
            run = subprocess.run(
                [sys.executable, "-m", "fxpool.cli", *words[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
            )
        else:
            pytest.fail(f"{page}:{line}: a shell command this test does not know how to run: {command}")
        assert run.returncode == 0, f"{page}:{line}: {command}\n{run.stdout[-1500:]}{run.stderr[-3000:]}"
