"""The settings every real-stack test module shares: both shipped stacks (their runners are the
run's); ``qwen`` (tests/conftest.py) opens the qwen3.6 tokenizer on them."""

from __future__ import annotations

import pytest

from app.settings import Settings
from tests.vllm_oracle import STACK_PATHS, VLLM_PYTHON


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test on the stacks' settings or runners drives their runners (vLLM processes serving
    requests): the server tier (tests/tiers.py, docs/testing.md)."""
    if {"settings", "runners"} & set(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.server)


@pytest.fixture(scope="module")
def settings() -> Settings:
    """Settings whose stacks are the shipped two (their runners are the run's)."""
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: run `make vllm-install`"
    assert STACK_PATHS["vllm-0.34.0"][0].is_dir(), "vLLM 0.34.0 is missing: run `make stacks`"
    return Settings(
        vllm_python=VLLM_PYTHON,
        vllm_timeout_s=600,
        stacks_dir=STACK_PATHS["vllm-0.34.0"][0].parent,
    )
