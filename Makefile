# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Compiled XLA programs are cached outside the repository so repeated runs skip compiles.
export JAXES_CACHE_DIR ?= $(HOME)/.cache/jaxes/xla

.PHONY: demo test lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[plot]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[plot,dev,digits]'
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(BIN)/jaxes train

# Two pytest workers, a test file each: on 2 cores two files compile at once (XLA compiles on
# one thread). Measured cold on the 2-core CPU: 52 min in one process (CI, a7b33a0), 45.7 min
# with 2 workers (a7b33a0), 36.0 min after the test compile cuts (bd69eab). Handing out the
# slow files first (--no-loadscope-reorder and a conftest sort, 71d9350) took 38.4 min: xdist's
# own order, by test count, is kept.
TEST_WORKERS ?= 2
test: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: $(VENV)/.test-installed
	$(BIN)/ruff check conftest.py src tests examples benchmarks notebooks
	$(BIN)/ruff format --check conftest.py src tests examples benchmarks notebooks

format: $(VENV)/.test-installed
	$(BIN)/ruff format conftest.py src tests examples benchmarks notebooks
	$(BIN)/ruff check --fix conftest.py src tests examples benchmarks notebooks

bench: $(VENV)/.test-installed
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/asktell.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
