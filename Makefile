# Set-up and the two jobs of the README. Everything installs into .venv with the pinned torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: zoo test test-all lint bench gpu-checks clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq -c constraints.txt -e '.[test,zoo,crosscheck,timm,smp,dev]'
	touch $(STAMP)

zoo: $(STAMP)  ## the main job: the model-zoo sweep on the default set
	$(PY) -m model_zoo_checks.zoo $(ZOO_ARGS)

test: $(STAMP)  ## the default test run (slow sweeps left out)
	$(PY) -m pytest -n 2 -q $(TEST_ARGS)

test-all: $(STAMP)  ## every test, slow sweeps included
	$(PY) -m pytest -n 2 -q --runslow $(TEST_ARGS)

lint: $(STAMP)  ## ruff (lint) over everything, mypy over the package
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)  ## the benchmark suite (writes reports/bench.json)
	$(PY) -m model_zoo_checks.benchmarks $(BENCH_ARGS)

gpu-checks: $(STAMP)  ## every GPU check in one call (needs CUDA): cuda tests, GPU benchmark, GPU zoo slice
	PY=$(PY) model_zoo_checks/gpu_checks.sh

clean:
	rm -rf $(VENV) reports
