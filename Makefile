# Set-up and the two jobs of the README. Everything installs into .venv with the pinned torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: zoo test test-all lint docs figures bench runtimes optimum gpu-checks gpu-wheels clean

RT_VENV := .venv-runtimes
RT_STAMP := $(RT_VENV)/.installed

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq -c constraints.txt -e '.[test,zoo,crosscheck,timm,smp,transformers,monai,thirdparty,dev,docs]'
	touch $(STAMP)

zoo: $(STAMP)  ## the main job: the model-zoo sweep on the default set
	$(PY) -m model_zoo_checks.zoo $(ZOO_ARGS)

test: $(STAMP)  ## the default test run (slow sweeps left out)
	$(PY) -m pytest -n 2 -q $(TEST_ARGS)

test-all: $(STAMP)  ## every test, slow sweeps included
	$(PY) -m pytest -n 2 -q --runslow $(TEST_ARGS)

lint: $(STAMP)  ## ruff (lint and format) over everything, mypy over the package, twine check of the wheel and sdist
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	d=$$(mktemp -d) && $(PY) -m build -q --no-isolation --outdir $$d . >/dev/null && $(VENV)/bin/twine check --strict $$d/*; \
		status=$$?; rm -rf $$d; exit $$status

docs: $(STAMP)  ## the documentation site in site/ (strict: a broken reference or a missing result fails)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

figures: $(STAMP)  ## the site's figures drawn again from the kept reports in docs/data/ (nothing is measured)
	$(PY) -m model_zoo_checks.figures bench docs/data/bench.json --out docs/figures --formats svg
	$(PY) -m model_zoo_checks.figures runtimes docs/data/runtimes.json --out docs/figures --formats svg

bench: $(RT_STAMP)  ## the benchmark suite (writes reports/bench.json and its figures); in the runtimes' venv, for ExecuTorch and NNCF
	PYTHONPATH=$(CURDIR) $(RT_VENV)/bin/python -m model_zoo_checks.benchmarks $(BENCH_ARGS)

# The deployment runtimes go into a venv layered over .venv (its packages stay visible; the runtimes'
# pins win inside it), so the test venv keeps its own versions.
$(RT_STAMP): $(STAMP) constraints.txt
	$(PYTHON) -m venv $(RT_VENV)
	$(RT_VENV)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/fxpool-base.pth', 'w').write(sys.argv[1])" \
		"$$($(PY) -c 'import site; print(site.getsitepackages()[0])')"
	$(RT_VENV)/bin/python -m pip install -qq -c constraints.txt executorch litert-torch coremltools nncf
	touch $(RT_STAMP)

runtimes: $(RT_STAMP)  ## the original and fxpool's conversion on ExecuTorch, LiteRT, Core ML, OpenVINO (TensorRT on CUDA)
	PYTHONPATH=$(CURDIR) $(RT_VENV)/bin/python -m model_zoo_checks.runtimes $(RUNTIMES_ARGS)
	PYTHONPATH=$(CURDIR) $(RT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_runtimes.py

# Hugging Face's ONNX exporter: optimum-onnx 0.1.0 needs transformers < 4.58, below .venv's, so its venv is a
# venv of its own (not layered over .venv: two transformers would meet), with the pins of constraints.txt
# but transformers'.
OPT_VENV := .venv-optimum
OPT_STAMP := $(OPT_VENV)/.installed

$(OPT_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(OPT_VENV)
	grep -v '^transformers==' constraints.txt > $(OPT_VENV)/constraints.txt
	$(OPT_VENV)/bin/python -m pip install -qq -c $(OPT_VENV)/constraints.txt -e '.[onnx]' optimum-onnx 'transformers==4.57.6' pytest
	touch $(OPT_STAMP)

optimum: $(OPT_STAMP)  ## Hugging Face's ONNX exporter with dynamic axes, through the hook: UperNet, BEiT, Data2Vec-vision
	PYTHONPATH=$(CURDIR) $(OPT_VENV)/bin/python -m model_zoo_checks.optimum_export $(OPTIMUM_ARGS)
	PYTHONPATH=$(CURDIR) $(OPT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_optimum_export.py

# On a bare GPU machine (its own python3 and torch, no .venv, no network): make gpu-wheels here first,
# and carry .whl/ along; the results go to $$OUT or reports/gpu/ (gpu.md holds the tables).
gpu-checks:  ## every GPU check in one call: cuda tests, pools, whole models, compile, AOTInductor, zoo slice
	PY=$${PY:-python3} model_zoo_checks/gpu_checks.sh

gpu-wheels:  ## the optional packages the GPU machine lacks, as wheels in .whl/ (Python 3.12, offline install)
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
		-d .whl segmentation_models_pytorch==0.6.0 onnxscript==0.7.2 onnx-ir==1.1.0 ml_dtypes

clean:
	rm -rf $(VENV) $(RT_VENV) $(OPT_VENV) reports site
