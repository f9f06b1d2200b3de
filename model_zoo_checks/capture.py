"""Third-party output of a sweep case, caught at the file-descriptor level and kept in a log file.

The exporters print from Python (warnings, progress lines) and from C++ (graph dumps); redirecting
file descriptors 1 and 2 catches both. :func:`console` is a handle on the terminal that stays
there, for the progress bar and the lines the user should see.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def console() -> IO[str]:
    """A text stream on the original stderr that redirections of fd 2 do not reach."""
    sys.stderr.flush()
    return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")


@contextmanager
def captured(log: Path) -> Iterator[None]:
    """Everything written to stdout and stderr inside the block goes to ``log`` (appended)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(log, "ab") as sink, warnings.catch_warnings():
            warnings.simplefilter("default")  # each case's log shows its warnings, not only the first case's
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
