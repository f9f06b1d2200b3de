# Set-up and the two jobs of the README. Everything installs into .venv with the pinned torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: zoo test test-all lint bench runtimes gpu-checks clean

RT_VENV := .venv-runtimes
RT_STAMP := $(RT_VENV)/.installed

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq -c constraints.txt -e '.[test,zoo,crosscheck,timm,smp,transformers,monai,dev]'
	touch $(STAMP)

zoo: $(STAMP)  ## the main job: the model-zoo sweep on the default set
	$(PY) -m model_zoo_checks.zoo $(ZOO_ARGS)

test: $(STAMP)  ## the default test run (slow sweeps left out)
	$(PY) -m pytest -n 2 -q $(TEST_ARGS)

test-all: $(STAMP)  ## every test, slow sweeps included
	$(PY) -m pytest -n 2 -q --runslow $(TEST_ARGS)

lint: $(STAMP)  ## ruff (lint and format) over everything, mypy over the package
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)  ## the benchmark suite (writes reports/bench.json)
	$(PY) -m model_zoo_checks.benchmarks $(BENCH_ARGS)

# The deployment runtimes go into a venv layered over .venv (its packages stay visible; the runtimes'
# pins win inside it), so the test venv keeps its own versions.
$(RT_STAMP): $(STAMP) constraints.txt
	$(PYTHON) -m venv $(RT_VENV)
	$(RT_VENV)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/fxpool-base.pth', 'w').write(sys.argv[1])" \
		"$$($(PY) -c 'import site; print(site.getsitepackages()[0])')"
	$(RT_VENV)/bin/python -m pip install -qq -c constraints.txt executorch litert-torch coremltools
	touch $(RT_STAMP)

runtimes: $(RT_STAMP)  ## the original and fxpool's conversion on ExecuTorch, LiteRT, Core ML, OpenVINO (TensorRT on CUDA)
	PYTHONPATH=$(CURDIR) $(RT_VENV)/bin/python -m model_zoo_checks.runtimes $(RUNTIMES_ARGS)
	PYTHONPATH=$(CURDIR) $(RT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_runtimes.py

gpu-checks: $(STAMP)  ## every GPU check in one call (needs CUDA): cuda tests, GPU benchmark, GPU zoo slice
	PY=$(PY) model_zoo_checks/gpu_checks.sh

clean:
	rm -rf $(VENV) $(RT_VENV) reports
