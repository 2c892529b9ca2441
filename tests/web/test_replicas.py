"""Replicas in one process: session ids carry the replica's id, and every route that names a
session of another replica answers 421 ``wrong_replica`` naming the holder."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.runtime.sessions import SessionStore, holder_of
from tests.conftest import as_page
from tests.web.conftest import session_body

SECRET = "a-secret-every-replica-shares-0123456789"
ELSEWHERE = "beta.AAAAAAAAAAAAAAAA"


def _session_routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path) of the app whose path names a session."""
    routes: Iterable[Any] = app.routes
    walk = getattr(fastapi.routing, "iter_route_contexts", None)  # FastAPI >= 0.165
    if walk is not None:
        routes = walk(routes)
    return sorted(
        (method, route.path)
        for route in routes
        if "{session_id}" in getattr(route, "path", "")
        for method in getattr(route, "methods", None) or ()
        if method != "HEAD"
    )


@pytest.fixture(scope="module")
def alpha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Replica ``alpha``, its model never loaded (no lifespan): a session lookup needs none."""
    db = tmp_path_factory.mktemp("replicas") / "p.db"
    app = create_app(Settings(db_path=db, replica_id="alpha", secret=SecretStr(SECRET)))
    yield as_page(TestClient(app))


def test_every_session_route_answers_421_naming_the_holder(alpha: TestClient) -> None:
    routes = _session_routes(alpha.app)  # type: ignore[arg-type]
    assert len(routes) >= 14  # the API's and the page's (a route added is checked too)
    for method, path in routes:
        url = path.replace("{session_id}", ELSEWHERE).replace("{index}", "0")
        response = alpha.request(method, url, json={"n": 1, "token_id": 0})
        assert response.status_code == 421, (method, path, response.text)
        error = response.json()["error"]
        assert error["code"] == "wrong_replica", (method, path)
        assert error["message"] == (
            f"session {ELSEWHERE!r} is held by replica 'beta', and this is replica 'alpha': "
            "route requests for sessions starting with 'beta.' to replica 'beta'"
        )


def test_the_export_of_a_session_and_the_pages_toast_name_the_holder(alpha: TestClient) -> None:
    api = alpha.get("/api/export", params={"target": "vllm", "session": ELSEWHERE})
    assert api.status_code == 421 and "held by replica 'beta'" in api.json()["error"]["message"]
    dialog = alpha.post("/ui/export", data={"session": ELSEWHERE}, headers={"HX-Request": "true"})
    assert dialog.status_code == 421 and "held by replica &#39;beta&#39;" in dialog.text
    toast = alpha.post(f"/ui/sessions/{ELSEWHERE}/step", headers={"HX-Request": "true"})
    assert toast.status_code == 421 and toast.headers["HX-Retarget"] == "#toast"
    assert "held by replica &#39;beta&#39;" in toast.text


def test_the_stream_of_another_replicas_session_is_421_not_a_stream(alpha: TestClient) -> None:
    response = alpha.get(
        f"/api/sessions/{ELSEWHERE}/events", headers={"Accept": "text/event-stream"}
    )
    assert response.status_code == 421
    assert response.headers["content-type"].startswith("application/json")


def test_an_unknown_id_of_this_replica_or_without_a_prefix_is_404(alpha: TestClient) -> None:
    for session_id in ("alpha.AAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAA"):
        response = alpha.get(f"/api/sessions/{session_id}")
        assert response.status_code == 404 and response.json()["error"]["code"] == (
            "session_not_found"
        )


def test_a_server_alone_names_the_holder_too() -> None:
    store = SessionStore(4, 60.0)
    with pytest.raises(Exception) as caught:
        store.get(ELSEWHERE)
    assert type(caught.value).__name__ == "WrongReplica"
    assert "held by replica 'beta', and this is a server alone" in str(caught.value)


@pytest.mark.parametrize(
    ("session_id", "holder"),
    [
        ("alpha.x", "alpha"),
        ("A-1_b.tok.en", "A-1_b"),
        ("token_without_dot", None),
        (".x", None),
        ("-bad.x", None),
        ("x" * 33 + ".t", None),
    ],
)
def test_the_holder_is_the_prefix_when_it_is_a_replica_id(
    session_id: str, holder: str | None
) -> None:
    assert holder_of(session_id) == holder


def test_a_replicas_sessions_carry_its_id(engine: Engine, tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "p.db", replica_id="alpha", secret=SecretStr(SECRET))
    with TestClient(create_app(settings, engine=engine)) as client:
        session_id = client.post("/api/sessions", json=session_body(max_tokens=4)).json()["id"]
        assert re.fullmatch(r"alpha\.[A-Za-z0-9_-]{16}", session_id)
        stepped = client.post(f"/api/sessions/{session_id}/step", json={"n": 2})
        assert stepped.status_code == 200 and len(stepped.json()["steps"]) == 2
        page = as_page(client).post(
            f"/ui/sessions/{session_id}/step", headers={"HX-Request": "true"}
        )
        assert page.status_code == 200
