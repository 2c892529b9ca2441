"""The app built in-process around the shared engine (the real model), or around an engine on
the toy model (``toy_client``: the fast tier, tests/web/toy_app.py)."""

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
from tests.web.toy_app import toy_engine

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


#: The caps of the apps above: the same on the toy engine.
TOY_SETTINGS: dict[str, Any] = {"max_sessions": 8, "max_body_bytes": 300_000}


@pytest.fixture(scope="session")
def toy() -> Iterator[Engine]:
    """An engine on the toy model (real xgrammar masks for a 36-token vocabulary, one compile
    worker), shared by the session's toy apps: for the tests whose point is not the model."""
    engine = toy_engine(Settings(**TOY_SETTINGS))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def toy_app(toy: Engine) -> FastAPI:
    """:func:`app` on the toy engine."""
    return create_app(Settings(**TOY_SETTINGS), engine=toy)


@pytest.fixture(scope="module")
def toy_client(toy_app: FastAPI) -> Iterator[TestClient]:
    """:func:`client` on the toy engine."""
    with TestClient(toy_app) as test_client:
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
