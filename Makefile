# Two commands set up everything: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The scheduler's compiled loops (numba, cached beside the sources) are compiled at install by
# a short run of the demo, so that the first `make demo` runs as fast as every later one.
COMPILE_LOOPS = $(BIN)/toposched demo --days 0.25 --no-progress --out $(VENV)/compiled-loops >/dev/null

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(COMPILE_LOOPS)
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(COMPILE_LOOPS)
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/toposched demo

# Servers and programs that integration tests start on loopback (PostgreSQL, Prometheus, a
# headless Chromium for the dashboard): installed from Debian when missing and this runs as
# root; otherwise those tests say why they are skipped.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q postgresql >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }; \
	  else echo "PostgreSQL is not installed: its tests will be skipped"; fi; \
	fi
	@for program in prometheus chromium; do \
	  if ! [ -x /usr/bin/$$program ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      export DEBIAN_FRONTEND=noninteractive; \
	      apt-get install -y -q --no-install-recommends $$program >/dev/null 2>&1 || \
	        { apt-get update -q >/dev/null && \
	          apt-get install -y -q --no-install-recommends $$program >/dev/null; }; \
	    else echo "$$program is not installed: its tests will be skipped"; fi; \
	  fi; \
	done

test: $(STAMP_DEV) system-deps
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -n auto --dist loadfile

bench: $(STAMP_DEV)
	$(BIN)/python -m pytest benchmarks --benchmark-only

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
