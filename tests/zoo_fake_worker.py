"""A stand-in for ``python -m model_zoo_checks.worker`` that imports no torch: the sweep's machinery tested fast.

It reads the job as the real worker does and acts on the model's name: ``fault/sigsegv`` dies of SIGSEGV,
``fault/once-sigsegv`` dies the first time only (it remembers in FXPOOL_ZOO_CASE_DIR), ``fault/sleep``
sleeps past any limit, ``fault/memory`` grows until stopped; any other name passes (``.../fail`` fails)
after ``FAKE_SECONDS`` seconds. Each case it starts is appended to the file ``FAKE_RUNS`` names.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from model_zoo_checks.plan import Job


def main() -> int:
    job, result = Job.from_json(sys.argv[1]), Path(sys.argv[2])
    if "FAKE_RUNS" in os.environ:
        with open(os.environ["FAKE_RUNS"], "a") as runs:
            runs.write(job.label + "\n")
    if job.model == "fault/sigsegv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if job.model == "fault/once-sigsegv":
        marker = Path(os.environ["FXPOOL_ZOO_CASE_DIR"]) / "crashed"
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGSEGV)
    if job.model == "fault/sleep":
        time.sleep(3600)
    if job.model == "fault/memory":
        hoard = [bytearray(32 * 2**20) for _ in range(64)]  # 2 GiB, touched
        print(len(hoard))
    time.sleep(float(os.environ.get("FAKE_SECONDS", "0")))
    print(f"exporter chatter for {job.label}")
    status = "fail" if job.model.endswith("/fail") else "pass"
    record = {"model": job.model, "input_shape": list(job.input_shape), "status": status, "reason": "", "pools": 1}
    result.write_text(json.dumps(record | {"eager_max_error": 0.0, "convert": "ok", "suite": "torchvision"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
