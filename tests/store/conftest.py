"""The stores' fixtures: each test of a store runs on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import SnapshotStore, open_store


# PostgreSQL is a real server: its tests are marked so (docs/testing.md), the fixture asks late.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.server)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new empty store's URL, of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'p.db'}"
    database: str = request.getfixturevalue("postgres_url")
    return database


@pytest.fixture
def store(url: str) -> Iterator[SnapshotStore]:
    opened = open_store(url, max_bytes=4000)
    yield opened
    opened.close()
