# make demo / make test work on a fresh machine: they build .venv and install what they need.
# On a machine whose Python already has the dependencies (the lent GPU box, which has no
# network), use the *-here targets: they run from the tree with the current interpreter.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo bench lint test-here gpu-test-here bench-here clean stress stress-here

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,cu12,ray]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

demo: install
	$(PY) -m gpumsg demo

bench: install
	$(PY) benchmarks/run_all.py

lint: install
	$(PY) -m ruff check gpumsg tests benchmarks tools

test-here:
	PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest -q

gpu-test-here:
	PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest -q -m gpu

bench-here:
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/run_all.py

# the full reliability campaigns of tests/stress (issue 15): 10,000 fuzz cases
# (GPUMSG_STRESS_CASES), 8 x 10,000 soak operations, 100 faults; GPUMSG_STRESS_BACKEND=cuda on
# a GPU (default sim). `make test` runs the same files at CI size.
STRESS_ENV = GPUMSG_STRESS=full GPUMSG_STRESS_CASES=$${GPUMSG_STRESS_CASES:-10000}

stress: install
	$(STRESS_ENV) $(PY) -m pytest -q -s tests/stress

stress-here:
	$(STRESS_ENV) PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest -q -s tests/stress

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
