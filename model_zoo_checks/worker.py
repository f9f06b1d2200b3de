"""The process one sweep case runs in: ``python -m model_zoo_checks.worker JOB_JSON RESULT_PATH``.

It runs :func:`model_zoo_checks.zoo.check` for the job with the job's thread count, and writes the case
as JSON to ``RESULT_PATH`` (under a temporary name, then renamed: a reader never sees half a record).
Whatever the exporters print goes to this process's stdout and stderr, which
:mod:`model_zoo_checks.isolation` keeps as the case's log. The process ends itself when the process that
started it is gone (a killed driver leaves no worker behind).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from .plan import Job


def _follow_parent() -> None:
    """Exit when the parent process is gone (this process is then a child of init or a subreaper)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="follow-parent").start()


def peak_memory_mb() -> float:
    """This process's largest resident set so far, in MiB."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def cpu_seconds() -> float:
    """This process's CPU time so far (user and system, every thread): the core-seconds the case took."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    job_json, result = list(sys.argv[1:] if argv is None else argv)
    _follow_parent()
    warnings.simplefilter("default")  # the log shows every warning once per place, deprecations included
    job = Job.from_json(job_json)

    import torch

    torch.set_num_threads(job.threads)
    from .zoo import check

    with tempfile.TemporaryDirectory(prefix="fxpool-zoo-case-") as workdir:
        case = check(job.model, job.input_shape, workdir, job.exporters, job.device, job.dtypes)
    case.peak_memory_mb = peak_memory_mb()
    case.cpu_seconds = cpu_seconds()
    temporary = Path(result).with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(case)))
    os.replace(temporary, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
