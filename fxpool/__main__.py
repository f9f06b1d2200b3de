"""``python -m fxpool``: the command line of `fxpool.cli`, as the ``fxpool`` script runs it."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
