# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pyproject.toml declares ranges; the exact versions `make demo` and `make test` install are
# these, so every machine tests the same set (`make lock` refreshes them).
LOCK := requirements/locked.txt
# Compiled XLA programs are cached outside the repository so repeated runs skip compiles.
export JAXES_CACHE_DIR ?= $(HOME)/.cache/jaxes/xla

.PHONY: demo test test-compat docs lint format bench lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.demo-installed: pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[brax,plot]'
	touch $@

# With the examples' own distribution (examples/pyproject.toml: the digits classifier and the
# Countdown fine-tune, which the examples, notebooks and their tests import).
$(VENV)/.test-installed: pyproject.toml examples/pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[brax,gymnax,plot,dev]' -e ./examples
	touch $@ $(VENV)/.demo-installed $(VENV)/.docs-installed

# The docs site's packages (dev has them too: tests/test_docs_api.py builds a tiny site).
$(VENV)/.docs-installed: pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[docs]'
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/jaxes train

# Two pytest workers, a test file each: on 2 cores two files compile at once (XLA compiles on
# one thread). Measured cold on the 2-core CPU: 52 min in one process (CI, a7b33a0), 45.7 min
# with 2 workers (a7b33a0), 36.0 min after the test compile cuts (bd69eab). Handing out the
# slow files first (--no-loadscope-reorder and a conftest sort, 71d9350) took 38.4 min: xdist's
# own order, by test count, is kept. 27.6 min cold for 1,597 tests at 396697f (seven new
# strategies in every STRATEGIES-wide test): --durations prints the 30 slowest, so that CI's log
# shows where the time goes before anything is cut.
TEST_WORKERS ?= 2
test: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

# The docs site (docs/conf.py) in build/docs: the guides, the API reference from the docstrings,
# the notebooks as committed (never run here). Every warning is an error, a cross-reference
# that resolves to nothing included (-n); --keep-going lists them all before failing, each with
# its file. -E rereads every page, so a warning is never hidden by a page Sphinx kept from the
# last build. JAX on the CPU: autodoc imports the modules and runs nothing.
DOCS_FLAGS := -W --keep-going -n -E
docs: $(VENV)/.docs-installed
	JAX_PLATFORMS=cpu $(BIN)/python -m sphinx -b html -q $(DOCS_FLAGS) -c docs -d build/docs-doctrees . build/docs
	@echo "docs: build/docs/index.html"

# jaxes as users install it: the built wheel in two fresh venvs, each running
# tests/test_install.py. floor: every core, gymnax and plot dependency at its declared
# floor (requirements/floor.txt) is installed first, as a researcher's own JAX would be, then
# the wheel with no constraint, which must leave every one of them in place. bare: the wheel
# with its gymnax extra only, no Brax.
COMPAT := build/compat
test-compat: $(VENV)/.test-installed
	rm -rf $(COMPAT) && mkdir -p $(COMPAT)
	$(BIN)/pip wheel --quiet --no-deps -w $(COMPAT) .
	$(PYTHON) -m venv $(COMPAT)/floor
	$(COMPAT)/floor/bin/pip install --quiet -r requirements/floor.txt
	$(COMPAT)/floor/bin/pip freeze > $(COMPAT)/floor-before.txt
	$(COMPAT)/floor/bin/pip install --quiet "$$(ls $(COMPAT)/jaxes-*.whl)[gymnax,plot]"
	$(COMPAT)/floor/bin/pip freeze --exclude jaxes | diff $(COMPAT)/floor-before.txt -
	$(COMPAT)/floor/bin/python -m pytest -q -p no:cacheprovider tests/test_install.py
	$(PYTHON) -m venv $(COMPAT)/bare
	$(COMPAT)/bare/bin/pip install --quiet -c $(LOCK) "$$(ls $(COMPAT)/jaxes-*.whl)[gymnax]" pytest
	! $(COMPAT)/bare/bin/python -c "import brax" 2>/dev/null
	$(COMPAT)/bare/bin/python -m pytest -q -p no:cacheprovider tests/test_install.py

# The newest versions pyproject.toml allows, installed into a fresh venv and frozen into
# $(LOCK); run `make test` on them before committing the new lock. The examples' distribution
# is installed too, so its own dependencies (scikit-learn) are locked with the rest.
lock:
	rm -rf build/lock && $(PYTHON) -m venv build/lock
	build/lock/bin/pip install --quiet '.[brax,gymnax,plot,dev]' ./examples
	(grep '^#' $(LOCK); build/lock/bin/pip freeze --exclude jaxes --exclude jaxes-examples) > $(LOCK).new
	mv $(LOCK).new $(LOCK)

lint: $(VENV)/.test-installed
	$(BIN)/ruff check src tests examples benchmarks notebooks docs/*.py
	$(BIN)/ruff format --check src tests examples benchmarks notebooks docs/*.py

format: $(VENV)/.test-installed
	$(BIN)/ruff format src tests examples benchmarks notebooks docs/*.py
	$(BIN)/ruff check --fix src tests examples benchmarks notebooks docs/*.py

bench: $(VENV)/.test-installed
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/asktell.py

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache
