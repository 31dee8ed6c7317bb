# make demo / make test work on a fresh machine: they build .venv and install what they need.
# Without a GPU that is the package and its test tools (the simulator runs everything); with one
# (nvidia-smi or libcuda found) also the CUDA 12 runtime wheels and the cuDNN frontend.
# EXTRAS overrides the choice (CI: EXTRAS=test,cu12,ray, see .ci/run).
# On a machine whose Python already has the dependencies (the lent GPU box, which has no
# network), use the *-here targets: they run from the tree with the current interpreter.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

# a GPU is here if nvidia-smi lists one or the driver's libcuda is installed
HAVE_GPU := $(shell (nvidia-smi -L >/dev/null 2>&1 || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so') && echo 1)
comma := ,
EXTRAS ?= $(if $(HAVE_GPU),test$(comma)cu12$(comma)dnn,test)
# one stamp per set of extras: asking for other extras installs them
STAMP = $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# where a benchmark run writes (git-ignored); $OUT on the GPU box
BENCH_OUT ?= $(if $(OUT),$(OUT),benchmarks/out)

.PHONY: install test test-pool demo bench bench-headline bench-report lint test-here gpu-test-here conformance \
	bench-here bench-headline-here clean stress stress-here

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

# the service's tests again with a pool of four compute streams per device (the default is
# one, GPUMSG_STREAMS): placement and ordering must hold either way (CI runs it)
test-pool: install
	GPUMSG_STREAMS=4 $(PY) -m pytest -q tests/service tests/client tests/memory tests/supervision \
		tests/stress

# the Array API standard's conformance suite against gpumsg.array_api (read from
# ../shared/external/array-api-tests or $$GPUMSG_ARRAY_API_TESTS; not part of this repository)
conformance: install
	$(PY) tools/array_api_conformance.py

demo: install
	$(PY) -m gpumsg demo

lint: install
	$(PY) -m ruff check gpumsg tests benchmarks tools examples

# -- benchmarks: torch and CuPy are the peers; they are not installed here (the GPU box has them)
bench: install
	GPUMSG_BENCH_OUT=$(BENCH_OUT) $(PY) benchmarks/run_all.py

bench-headline: install
	GPUMSG_BENCH_OUT=$(BENCH_OUT) $(PY) benchmarks/run_all.py --headline

# RESULTS.md and benchmarks/plots/ from the last run in $(BENCH_OUT) (and the kept
# benchmarks/results/); needs only matplotlib, installed into the venv when missing
bench-report: | $(PY)
	$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install --quiet matplotlib
	$(PY) benchmarks/report.py --src $(BENCH_OUT)

# -- the GPU box: no network, its own Python
test-here:
	PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest -q

gpu-test-here:
	PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest -q -m gpu

bench-here:
	GPUMSG_BENCH_OUT=$(BENCH_OUT) PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/run_all.py

# what RESULTS.md is made from, in about five minutes on one H100
bench-headline-here:
	GPUMSG_BENCH_OUT=$(BENCH_OUT) PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/run_all.py --headline

# the full reliability campaigns of tests/stress: 10,000 fuzz cases (GPUMSG_STRESS_CASES),
# 8 x 10,000 soak operations, 100 faults; GPUMSG_STRESS_BACKEND=cuda on a GPU (default sim).
# `make test` runs the same files at CI size.
STRESS_ENV = GPUMSG_STRESS=full GPUMSG_STRESS_CASES=$${GPUMSG_STRESS_CASES:-10000}

stress: install
	$(STRESS_ENV) $(PY) -m pytest -q -s tests/stress

stress-here:
	$(STRESS_ENV) PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest -q -s tests/stress

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
