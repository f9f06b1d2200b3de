"""One sweep case in a process of its own, under a time and a memory limit, tried again once after a crash.

:func:`attempt` starts ``python -m model_zoo_checks.worker`` (:mod:`model_zoo_checks.worker`) for a
:class:`~model_zoo_checks.plan.Job`, sends everything it prints to a log, and watches it: past the time
limit, or with more resident memory than the memory limit, it is killed (SIGKILL) and the case is a
failure that names the limit. A worker that dies of a signal (a segmentation fault or a floating-point
exception in C++ code) is started once more, since a crash can be the machine's rather than the model's;
if it dies again the case is a failure that names the signal. Either way the other cases never notice:
no crash, leak or hang of one case reaches another.

Both of the sweep's backends call :func:`attempt`: Ray runs it as a task on whichever node has a core
and the memory the limit asks for, the local backend in a thread per worker. The worker's case comes
back as the JSON record it wrote, with its log, so nothing needs a file system shared with the driver.

The memory limit reads the worker's resident set from ``/proc`` (Linux); elsewhere it is not enforced.
Nothing here imports torch: Ray workers that only supervise stay small.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .plan import Job

CHECKOUT = Path(__file__).resolve().parent.parent  # where ``python -m model_zoo_checks.worker`` imports from
WORKER = "model_zoo_checks.worker"
POLL_S = 0.2
LOG_KEPT = 200_000  # characters of a worker's output kept (its end: where the error is)
ATTEMPTS = 2  # a worker that dies of a signal is started once more
CASE_DIR = "FXPOOL_ZOO_CASE_DIR"


@dataclass(frozen=True)
class Limits:
    """What one case may take: wall-clock seconds and resident memory in bytes."""

    seconds: float
    memory_bytes: int


@dataclass(frozen=True)
class Exit:
    """How a worker process ended."""

    returncode: int | None
    signal: str = ""  # the signal it died of ("SIGSEGV"), "" where it exited
    limit: str = ""  # the limit it was stopped at ("time limit of 900 s"), "" where none
    peak_memory_bytes: int = 0  # the largest resident set seen while it ran
    seconds: float = 0.0

    @property
    def crashed(self) -> bool:
        """Died of a signal nobody sent it: worth one more attempt."""
        return bool(self.signal) and not self.limit


@dataclass(frozen=True)
class Finished:
    """A case's outcome as its worker left it: the record it wrote (None where it wrote none), why not, the log."""

    record: dict[str, Any] | None
    log: str
    exits: tuple[Exit, ...] = field(default_factory=tuple)
    host: str = ""
    lost: str = ""  # why the backend could not run the case at all ("" where it ran)

    @property
    def why_not(self) -> str:
        """Why the worker left no record ("" where it did): the limit or the signal, or the exit status."""
        if self.record is not None:
            return ""
        if self.lost or not self.exits:
            return self.lost or "the case never ran"
        last = self.exits[-1]
        if last.limit:
            return f"the worker process was stopped at the {last.limit}"
        if last.signal:
            times = f" ({len(self.exits)} attempts)" if len(self.exits) > 1 else ""
            return f"the worker process died of {last.signal}{times}"
        return f"the worker process exited with status {last.returncode} without writing its case"


INTERRUPTED = "interruption of the sweep"
# Set by a driver that stops (Ctrl-C): the workers this process supervises are killed, nothing more starts.
STOP = threading.Event()


def supervise(
    command: list[str], limits: Limits, log: Path, cwd: Path | None = None, verbose: bool = False, env: dict[str, str] | None = None
) -> Exit:
    """Run ``command`` with its output in ``log`` (on the console with ``verbose``), within ``limits``
    (``env``: variables to add to this process's); killed at once when :data:`STOP` is set."""
    started = time.monotonic()
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    env = os.environ | {"PYTHONPATH": path} | (env or {})
    with open(log, "ab") as sink:
        output = None if verbose else sink
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        peak, limit = 0, ""
        while process.poll() is None:
            peak = max(peak, resident_bytes(process.pid))
            if peak > limits.memory_bytes:
                limit = f"memory limit of {limits.memory_bytes / 2**30:.1f} GiB (resident {peak / 2**30:.1f} GiB)"
            elif time.monotonic() - started > limits.seconds:
                limit = f"time limit of {limits.seconds:.0f} s"
            elif STOP.is_set():
                limit = INTERRUPTED
            if limit:
                process.kill()
                process.wait()
                break
            time.sleep(POLL_S)
    code = process.returncode
    return Exit(code, signal_name(code), limit, peak, time.monotonic() - started)


def signal_name(returncode: int | None) -> str:
    """``SIGSEGV`` for a process killed by that signal (a negative return code), else ""."""
    if returncode is None or returncode >= 0:
        return ""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def resident_bytes(pid: int) -> int:
    """The process's resident set, from /proc (0 where there is none to read)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def attempt(job: Job, limits: Limits, verbose: bool = False, worker: str | None = None) -> Finished:
    """Run the job's case in a worker process (twice where the first dies of a signal); never raises for the case.

    ``worker``: the module ``python -m`` runs (default :data:`WORKER`; the tests give a stand-in)."""
    scratch = Path(tempfile.mkdtemp(prefix="fxpool-zoo-"))
    try:
        log, result = scratch / "case.log", scratch / "case.json"
        exits: list[Exit] = []
        for _ in range(ATTEMPTS):
            if STOP.is_set():
                break
            command = [sys.executable, "-m", worker or WORKER, job.to_json(), str(result)]
            # CASE_DIR: a folder the attempts of one case share (faults.py's once-only crash remembers itself there)
            exits.append(supervise(command, limits, log, cwd=CHECKOUT, verbose=verbose, env={CASE_DIR: str(scratch)}))
            if not exits[-1].crashed:
                break
            with open(log, "a") as sink:
                sink.write(f"\n[fxpool zoo] the worker process died of {exits[-1].signal}; starting it once more\n")
        record = json.loads(result.read_text()) if result.is_file() else None
        text = log.read_text(errors="replace") if log.is_file() else ""
        return Finished(record, text[-LOG_KEPT:], tuple(exits), socket.gethostname())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
