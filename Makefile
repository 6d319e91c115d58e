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
# one thread). Files go out in the order tests/conftest.py sorts them (slow files first), not
# xdist's by-test-count order, which left the one-test notebook files for the end. Measured
# cold on the 2-core CPU: 52 min in one process (CI, a7b33a0), 45.7 min with 2 workers
# (a7b33a0), 36.0 min with 2 workers after the test compile cuts (bd69eab).
TEST_WORKERS ?= 2
test: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

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
