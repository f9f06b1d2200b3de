"""Who runs the sweep's cases: Ray (a local instance, or a cluster by address), or local worker processes.

Both take the jobs in the order given (the longest first) and yield each job's
:class:`~model_zoo_checks.isolation.Finished` as soon as it finishes, whatever the order, so the driver
can record it at once. Each case runs in a process of its own under its limits either way
(:func:`model_zoo_checks.isolation.attempt`); the backends only decide where.

- :func:`ray_results`: every job a Ray task asking for the job's threads as CPUs, the memory limit as memory
  and a GPU where the job runs on one, so Ray starts a case only on a node with all of them free.
  ``ray.init(address)`` starts a local instance where ``address`` is None and ``RAY_ADDRESS`` unset, and
  joins a cluster otherwise (the checkout travels as the tasks' working directory; the nodes need the same
  Python packages). A task whose Ray worker is lost (a node failing, Ray's out-of-memory killer) is run
  once more by Ray (``max_retries=1``); where it is lost again the case is recorded with Ray's reason.
- :func:`process_results`: ``workers`` threads on this machine, each supervising one worker process at a
  time (Ray not installed, or ``--backend processes``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from .isolation import CHECKOUT, STOP, Finished, Limits, attempt
from .plan import Job

# What the tasks' working directory leaves behind on its way to a cluster.
NOT_SHIPPED = [".git", ".venv", ".venv-runtimes", "reports", "site", "*.onnx", "*.pt2", "**/__pycache__"]


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def process_results(
    jobs: Sequence[Job], limits: Limits, workers: int, verbose: bool = False, worker: str | None = None
) -> Iterator[tuple[Job, Finished]]:
    """Each job's outcome as it finishes, ``workers`` cases at a time on this machine (``worker``: see
    :func:`~model_zoo_checks.isolation.attempt`)."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zoo-case")
    running = {pool.submit(attempt, job, limits, verbose, worker): job for job in jobs}
    try:
        for future in as_completed(running):
            yield running[future], future.result()
    finally:  # an interrupted driver starts nothing more and stops the workers it runs
        STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        STOP.clear()


def ray_results(
    jobs: Sequence[Job],
    limits: Limits,
    address: str | None,
    workers: int | None,
    verbose: bool = False,
    worker: str | None = None,
) -> Iterator[tuple[Job, Finished]]:
    """Each job's outcome as it finishes, each job a Ray task (see the module's docstring)."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:  # a local instance: this machine's cores (or ``workers`` of them), no dashboard
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=verbose, object_store_memory=256 * 2**20)
    else:
        ray.init(
            address=address,
            log_to_driver=verbose,
            runtime_env={"working_dir": str(CHECKOUT), "excludes": NOT_SHIPPED},
        )
    try:
        task = ray.remote(max_retries=1)(attempt)
        pending = {
            task.options(num_cpus=job.threads, num_gpus=int(job.device != "cpu"), memory=limits.memory_bytes).remote(
                job, limits, verbose, worker
            ): job
            for job in jobs
        }
        while pending:
            (done,), _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(done)
            try:
                finished = ray.get(done)
            except ray.exceptions.RayError as error:  # the Ray worker itself was lost, twice
                reason = f"Ray lost the task twice: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
                finished = Finished(None, reason, lost=reason)
            yield job, finished
    finally:
        ray.shutdown()
