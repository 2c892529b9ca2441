"""The app built in-process around the shared engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.examples import load_examples
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

NESTED_SOURCE = next(e for e in load_examples() if e.id == "nested").source()


@pytest.fixture(scope="module")
def app(engine: Engine) -> FastAPI:
    """An app sharing the session's engine, with small caps."""
    return create_app(Settings(max_sessions=8, max_body_bytes=300_000), engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    """An in-process client (lifespan included) carrying the page's CSRF cookie and token."""
    with TestClient(app) as test_client:
        yield as_page(test_client)


def session_body(**overrides: Any) -> dict[str, Any]:
    """A session request on the nested example, greedy."""
    body: dict[str, Any] = {
        "grammar": {"kind": "json_schema", "source": NESTED_SOURCE},
        "messages": [
            {"role": "system", "content": "You manage user accounts. Reply with JSON only."},
            {"role": "user", "content": "Create user 42, Ada Lovelace, dark theme."},
        ],
        "schema_in_prompt": True,
        "max_tokens": 120,
    }
    body.update(overrides)
    return body
