"""Shared fixtures: the real model and compiler, loaded once per test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.engine import Engine
from app.settings import Settings


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings from the environment (the model cache is shared with `make run`)."""
    return Settings(compile_workers=2)


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    """The real default model with real xgrammar compile workers."""
    loaded = Engine.load(settings)
    yield loaded
    loaded.close()
