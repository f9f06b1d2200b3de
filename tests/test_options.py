"""What the sweep and the benchmarks share (model_zoo_checks/options.py): the facts a report keeps of its
run, and error texts without this machine's paths."""

from __future__ import annotations

import datetime
import re

from model_zoo_checks.options import run_facts, without_machine_paths


def test_an_installed_files_path_keeps_its_package_on() -> None:
    error = "ValueError: Failed: /work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/pooling.py:1554:0: error"
    assert without_machine_paths(error) == "ValueError: Failed: torch/nn/modules/pooling.py:1554:0: error"
    assert without_machine_paths(r"C:\Python\Lib\site-packages\torch\x.py") == r"torch\x.py"


def test_other_absolute_paths_keep_their_file_name_and_addresses_stay_whole() -> None:
    assert without_machine_paths("saved to /tmp/abc/model.onnx (see /home/me/x.log)") == "saved to model.onnx (see x.log)"
    text = "see https://pytorch.org/docs/stable/onnx.html and torch/nn/modules/pooling.py"
    assert without_machine_paths(text) == text


def test_a_run_records_its_day_and_cpu() -> None:
    facts = run_facts()
    assert facts["date"] == datetime.date.today().isoformat()
    assert re.fullmatch(r".+, \d+ cores", facts["cpu"])
