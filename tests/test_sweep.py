"""The sweep's machinery (model_zoo_checks: plan, journal, isolation, backends, the driver), on stand-in cases.

The worker is ``tests/zoo_fake_worker.py`` (no torch: each case takes a fraction of a second), so the
scheduling, the limits, the crash retry, the journal and ``--resume`` are tested in the default run;
Ray itself, and real models through it, only with ``--runslow`` (and skipped without Ray).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from model_zoo_checks import backends, catalog, isolation, journal, plan, reporting, zoo
from model_zoo_checks.isolation import Limits

FAKE = "tests.zoo_fake_worker"
ROOMY = Limits(seconds=60, memory_bytes=2**30)


def _job(model: str, size: int = 8) -> plan.Job:
    return plan.Job(model, (1, 3, size, size), ("dynamo",))


def test_a_job_travels_as_json_and_names_its_log() -> None:
    job = plan.Job("timm/resnet18:max", (1, 3, 224, 224), ("dynamo", "pt2"), dtypes=("float32", "bfloat16"), threads=2)
    assert plan.Job.from_json(job.to_json()) == job
    assert job.label == "timm/resnet18:max@224x224" and plan.log_name(job.label) == "timm_resnet18_max@224x224.log"


def test_the_longest_cases_start_first_and_ties_keep_their_order() -> None:
    jobs = [_job("a", 8), _job("b", 64), _job("c", 8), _job("d", 32)]
    ordered = plan.longest_first(jobs, lambda model, shape: shape[-1] ** 2)
    assert [j.model for j in ordered] == ["b", "d", "a", "c"]


def test_models_without_a_pool_are_reported_only_when_every_model_is_asked(monkeypatch) -> None:
    from model_zoo_checks import registry

    rows = {"with": registry.Entry(10, True), "without": registry.Entry(10, False), "broken": registry.Entry(0, False, None, "E")}
    monkeypatch.setattr(registry, "entry", rows.__getitem__)
    assert plan.unswept(["with", "without", "broken"], every_model=False) == {}
    assert plan.unswept(["with", "without", "broken"], every_model=True) == {"without": catalog.NO_POOL}  # broken: runs, fails


def test_the_journal_keeps_every_finished_case_and_ignores_a_line_cut_short(tmp_path) -> None:
    journal.begin(tmp_path, [{"model": "a", "input_shape": [1, 3, 8, 8], "status": "pass"}])
    journal.append(tmp_path, {"model": "b", "input_shape": [1, 3, 8, 8], "status": "fail"})
    journal.append(tmp_path, {"model": "b", "input_shape": [1, 3, 8, 8], "status": "pass"})  # the later one wins
    with open(tmp_path / journal.JOURNAL, "a") as cut:
        cut.write('{"model": "c", "input_sh')  # the driver killed mid-write
    assert [(r["model"], r["status"]) for r in journal.read(tmp_path)] == [("a", "pass"), ("b", "pass")]
    journal.begin(tmp_path, [])
    assert journal.read(tmp_path) == []


def test_a_report_from_before_the_journal_is_read_from_report_json(tmp_path) -> None:
    (tmp_path / "report.json").write_text(json.dumps([{"model": "a", "input_shape": [1, 3, 8, 8], "status": "skip"}]))
    assert journal.read(tmp_path)[0]["status"] == "skip"


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_supervisor_names_the_signal_and_the_limit_it_stopped(tmp_path) -> None:
    log = tmp_path / "log"
    ok = isolation.supervise(_python("print('hello')"), ROOMY, log)
    assert (ok.returncode, ok.signal, ok.limit, ok.crashed) == (0, "", "", False) and "hello" in log.read_text()
    crashed = isolation.supervise(_python("import os, signal; os.kill(os.getpid(), signal.SIGFPE)"), ROOMY, log)
    assert (crashed.signal, crashed.limit, crashed.crashed) == ("SIGFPE", "", True)
    slow = isolation.supervise(_python("import time; time.sleep(60)"), Limits(1.0, 2**30), log)
    assert slow.limit == "time limit of 1 s" and slow.signal == "SIGKILL" and not slow.crashed
    if Path("/proc/self/statm").is_file():
        big = isolation.supervise(_python("import time; x = bytearray(400 * 2**20); time.sleep(30)"), Limits(60, 100 * 2**20), log)
        assert big.limit.startswith("memory limit of 0.1 GiB (resident") and big.peak_memory_bytes > 100 * 2**20
    assert isolation.signal_name(-signal.SIGSEGV) == "SIGSEGV" and isolation.signal_name(1) == ""


def test_a_crash_is_tried_once_more_and_a_second_crash_is_the_verdict(tmp_path) -> None:
    again = isolation.attempt(_job("fault/once-sigsegv"), ROOMY, worker=FAKE)
    assert again.record is not None and [e.signal for e in again.exits] == ["SIGSEGV", ""]
    assert "starting it once more" in again.log and "exporter chatter" in again.log
    case = zoo.finished_case(_job("fault/once-sigsegv"), again)
    assert case.status == "pass" and case.attempts == 2 and "the first worker process died of SIGSEGV" in case.reason
    twice = isolation.attempt(_job("fault/sigsegv"), ROOMY, worker=FAKE)
    assert twice.record is None and twice.why_not == "the worker process died of SIGSEGV (2 attempts)"
    failed = zoo.finished_case(_job("fault/sigsegv"), twice)
    assert (failed.status, failed.stopped, failed.attempts) == ("fail", "SIGSEGV", 2)
    assert reporting.stages(failed)["runs"] == "fails"


def test_a_case_past_its_limit_is_not_tried_again(tmp_path) -> None:
    stopped = isolation.attempt(_job("fault/sleep"), Limits(1.0, 2**30), worker=FAKE)
    assert len(stopped.exits) == 1 and stopped.why_not == "the worker process was stopped at the time limit of 1 s"


def test_local_workers_hand_back_each_case_as_it_finishes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SECONDS", "0.5")
    jobs = [_job("fault/sleep"), _job("quick")]
    finished = backends.process_results(jobs, Limits(8.0, 2**30), workers=2, worker=FAKE)
    assert [job.model for job, _ in finished] == ["quick", "fault/sleep"]  # the quick case did not wait for the slow one


def _sweep(tmp_path: Path, folder: str, *options: str) -> int:
    models = ["fault/once-sigsegv", "fault/sigsegv", "alexnet", "vgg11", "squeezenet1_1/fail"]
    options = ("--backend", "processes", "--sizes", "8", "16", "--report", str(tmp_path / folder), *options)
    return zoo.main(["--models", *models, *options])


@pytest.fixture
def fake_worker(monkeypatch, tmp_path):
    monkeypatch.setattr(isolation, "WORKER", FAKE)
    monkeypatch.setenv("FAKE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(zoo, "cost", lambda model, shape: shape[-1])  # no census of the stand-in names
    return tmp_path / "runs"


def _label(record: dict) -> str:
    return plan.Job(record["model"], tuple(record["input_shape"]), ()).label


def _started(runs: Path) -> list[str]:
    return runs.read_text().split() if runs.is_file() else []


def test_a_resumed_sweep_runs_only_what_the_killed_one_left(tmp_path, fake_worker) -> None:
    assert _sweep(tmp_path, "all", "--workers", "2") == 1  # failures: the planted crash and .../fail
    everything = journal.read(tmp_path / "all")
    assert len(everything) == 10 and len(_started(fake_worker)) == 14  # four crashed starts tried again
    # A run killed after four cases left a journal of four (and a last line cut short).
    killed = tmp_path / "killed"
    journal.begin(killed, everything[:4])
    with open(killed / journal.JOURNAL, "a") as cut:
        cut.write('{"model": "alexnet", "inp')
    fake_worker.unlink()
    assert _sweep(tmp_path, "killed", "--resume") == 1
    kept = {_label(r) for r in everything[:4]}
    assert not kept & set(_started(fake_worker))  # nothing finished was run again
    assert set(_started(fake_worker)) == {_label(r) for r in everything} - kept
    resumed = [zoo.case_from_record(r) for r in json.loads((killed / "report.json").read_text())]
    serial = [zoo.case_from_record(r) for r in json.loads((tmp_path / "all" / "report.json").read_text())]
    assert reporting.differences(resumed, serial) == []
    # The report lists the cases in the catalog's order, whatever order they finished in.
    assert [(c.model, c.input_shape[-1]) for c in serial] == [
        (m, s) for m in ["fault/once-sigsegv", "fault/sigsegv", "alexnet", "vgg11", "squeezenet1_1/fail"] for s in (8, 16)
    ]
    fake_worker.unlink()
    assert _sweep(tmp_path, "killed", "--resume", "--rerun-failures") == 1
    assert sorted(_started(fake_worker)) == sorted(
        ["fault/sigsegv@8x8", "fault/sigsegv@8x8", "fault/sigsegv@16x16", "fault/sigsegv@16x16"]
        + ["squeezenet1_1/fail@8x8", "squeezenet1_1/fail@16x16"]
    )


def test_a_sweep_writes_its_reports_as_it_goes_and_a_figure_at_the_end(tmp_path, fake_worker) -> None:
    assert _sweep(tmp_path, "r", "--workers", "2") == 1
    folder = tmp_path / "r"
    table = (folder / "report.md").read_text()
    assert "| fault/sigsegv | faults | 8, 16 | fail | ✗ | – |" in table
    assert "the worker process died of SIGSEGV (2 attempts)" in table
    assert (folder / "compatibility.csv").read_text().count("\n") == 11
    assert (folder / "logs" / "fault_once-sigsegv@8x8.log").read_text().count("exporter chatter") == 1
    pytest.importorskip("matplotlib")
    assert (folder / "zoo.svg").read_text().startswith("<?xml") and (folder / "zoo.png").stat().st_size > 5_000


def test_differences_leave_out_what_is_measured() -> None:
    a = zoo.Case("alexnet", (1, 3, 8, 8), "pass", seconds=1.0, ort_ms_converted=2.0, host="x", worker_seconds=3.0)
    b = zoo.Case("alexnet", (1, 3, 8, 8), "pass", seconds=9.0, ort_ms_converted=5.0, host="y", worker_seconds=7.0)
    assert reporting.differences([a], [b]) == []
    c = zoo.Case("alexnet", (1, 3, 8, 8), "fail", reason="eager error")
    assert reporting.differences([a], [c]) == ["alexnet 1x3x8x8: status 'pass' != 'fail'; reason '' != 'eager error'"]
    assert reporting.differences([a], []) == ["alexnet 1x3x8x8: only in the first"]


@pytest.mark.slow
def test_ray_runs_the_cases_each_in_its_worker_with_the_crash_recorded(tmp_path, fake_worker) -> None:
    pytest.importorskip("ray")
    assert _sweep(tmp_path, "ray", "--backend", "ray", "--workers", "2") == 1
    assert _sweep(tmp_path, "serial", "--workers", "1") == 1
    on_ray = [zoo.case_from_record(r) for r in json.loads((tmp_path / "ray" / "report.json").read_text())]
    serial = [zoo.case_from_record(r) for r in json.loads((tmp_path / "serial" / "report.json").read_text())]
    assert reporting.differences(on_ray, serial) == []
    crashed = next(c for c in on_ray if c.model == "fault/sigsegv")
    assert crashed.stopped == "SIGSEGV" and crashed.attempts == 2


@pytest.mark.slow
def test_real_cases_on_ray_match_a_serial_run(tmp_path) -> None:
    pytest.importorskip("ray")
    models = ["--models", "squeezenet1_1", "fault/sigfpe", "--sizes", "64", "--exporters", "dynamo", "torch.export"]
    assert zoo.main(["--backend", "ray", "--workers", "2", *models, "--report", str(tmp_path / "ray")]) == 1
    assert zoo.main(["--backend", "processes", "--workers", "1", *models, "--report", str(tmp_path / "serial")]) == 1
    on_ray, serial = (
        [zoo.case_from_record(r) for r in json.loads((tmp_path / d / "report.json").read_text())] for d in ("ray", "serial")
    )
    assert reporting.differences(on_ray, serial) == []
    assert [c.status for c in on_ray] == ["pass", "fail"] and on_ray[1].stopped == "SIGFPE"


def test_a_slice_fits_a_line_of_core_seconds_against_cost_and_sums_it_over_the_registry() -> None:
    from model_zoo_checks import estimate

    assert estimate.fit([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) == pytest.approx((1.0, 2.0))
    assert estimate.fit([(1.0, 2.0), (1.0, 4.0)]) == (3.0, 0.0)
    pytest.importorskip("timm")
    shapes = [("timm/resnet18", 224), ("timm/resnet50", 224), ("timm/efficientnet_b0", 256)]
    slice_ = [
        {"model": n, "input_shape": [1, 3, s, s], "status": "pass", "cpu_seconds": 10 + 1e-11 * catalog.cost(n, (1, 3, s, s))}
        for n, s in shapes
    ]
    found = estimate.estimate(slice_, "timm")
    assert found.fixed_s == pytest.approx(10) and found.per_cost_s == pytest.approx(1e-11)
    assert found.registry_models == 818 and found.registry_cases == 2 * 818
    assert found.cores_for_an_hour == -(-int(found.registry_core_s) // 3600) and found.over_an_hour >= 1  # SAM ViT-H at 1056
    assert "core-hours" in estimate.markdown(found, "timm")


def test_a_stopped_sweep_records_what_finished_and_stops_its_workers(tmp_path, fake_worker) -> None:
    import os
    import threading

    stop = threading.Timer(8.0, os.kill, (os.getpid(), signal.SIGTERM))  # what a scheduler sends
    stop.start()
    try:
        options = ["--backend", "processes", "--workers", "2", "--sizes", "8", "--report", str(tmp_path / "r")]
        assert zoo.main(["--models", "alexnet", "fault/sleep", *options]) == 130
    finally:
        stop.cancel()
    assert [(r["model"], r["status"]) for r in journal.read(tmp_path / "r")] == [("alexnet", "pass")]  # not the one stopped
    assert sorted(_started(fake_worker)) == ["alexnet@8x8", "fault/sleep@8x8"]  # both started, in either order
    assert zoo.main(["--models", "alexnet", *options, "--resume"]) == 0 and len(_started(fake_worker)) == 2  # kept, not rerun
