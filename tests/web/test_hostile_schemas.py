"""Schemas and inputs from issue #27 (items 2, 3 and 8) through the app: a backtracking pattern
comes back with a verdict, a reference that leaves the document is a 422 naming its pointer and
is never fetched (a real listener that must receive no connection, a real file whose content must
not appear), and nothing here is a 500. The real sandbox, jsonschema and xgrammar, on the toy
model (tests/web/toy_app.py): the model is not what these answers are about."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.schemas.bodies import PermalinkIn
from app.web.services import permalinks as sharing
from tests.conftest import as_page
from tests.listener import Listener
from tests.web.conftest import session_body

SECRET = "FILE-SECRET-c41d9e"
# 40 a's then "!": Python's re takes hours on "^(a+)+$" (28 took 20 s, each a doubles it).
HOSTILE_TEXT = json.dumps("a" * 40 + "!")
BACKTRACKING = {"type": "string", "pattern": "^(a+)+$"}


@pytest.fixture(scope="module")
def hostile_app(toy: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    db_path = tmp_path_factory.mktemp("hostile") / "permalinks.db"
    return create_app(Settings(db_path=db_path, max_body_bytes=300_000), engine=toy)


@pytest.fixture(scope="module")
def api(hostile_app: FastAPI) -> Iterator[TestClient]:
    """A client that also reaches the page's routes (it holds the page's CSRF token)."""
    with TestClient(hostile_app) as test_client:
        yield as_page(test_client)


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    with Listener() as running:
        yield running


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "secret.json"
    path.write_text(json.dumps({"const": SECRET}))
    return path


def _grammar(schema: Any) -> dict[str, Any]:
    return {"kind": "json_schema", "source": json.dumps(schema, indent=2)}


def _hostile(kind: str, listener: Listener, secret_file: Path) -> tuple[Any, str]:
    """A schema whose only flaw is one reference, and that reference's pointer."""
    if kind == "loop":
        return {"allOf": [{"$ref": "#"}]}, "/allOf/0/$ref"
    ref = {
        "http": listener.url,
        "file": secret_file.as_uri(),
        "unresolvable": "#/$defs/missing",
        "relative": "secret.json",
    }[kind]
    # the reference sits in a branch that validating 1 never reaches: the walk is static
    return {"anyOf": [{"type": "integer"}, {"$ref": ref}]}, "/anyOf/1/$ref"


def _request(route: str, grammar: dict[str, Any]) -> dict[str, Any]:
    tests = [{"text": "1", "expect": "pass"}]
    return {
        "/api/compile": grammar,
        "/api/sessions": session_body(grammar=grammar, max_tokens=5),
        "/api/tests": {"grammar": grammar, "tests": tests},
        "/api/doctor": {"grammar": grammar, "budget_ms": 200},
        "/api/permalinks": {**session_body(grammar=grammar, max_tokens=5), "actions": [],
                            "tests": tests},
    }[route]  # fmt: skip


ROUTES = ["/api/compile", "/api/sessions", "/api/tests", "/api/doctor", "/api/permalinks"]
KINDS = ["http", "file", "unresolvable", "relative", "loop"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("route", ROUTES)
def test_a_reference_that_leaves_the_document_is_refused_by_its_pointer_and_never_fetched(
    api: TestClient, listener: Listener, secret_file: Path, route: str, kind: str
) -> None:
    schema, pointer = _hostile(kind, listener, secret_file)
    response = api.post(route, json=_request(route, _grammar(schema)))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "grammar_invalid"
    assert error["pointer"] == pointer
    assert error["message"].startswith(f"{pointer}: ")
    assert error["line"] > 1 and error["column"] > 1
    assert listener.connections == 0
    assert SECRET not in response.text and listener.secret not in response.text


@pytest.mark.parametrize("kind", ["http", "file", "loop"])
def test_a_permalink_stored_before_the_walk_is_refused_when_fetched_never_fetching(
    api: TestClient,
    hostile_app: FastAPI,
    toy: Engine,
    listener: Listener,
    secret_file: Path,
    kind: str,
) -> None:
    schema, pointer = _hostile(kind, listener, secret_file)
    body = PermalinkIn.model_validate(
        {**session_body(grammar=_grammar(schema), max_tokens=5), "actions": []}
    )
    tests = [{"text": "1", "expect": "pass", "recorded": None}]
    snapshot = sharing.snapshot_of_request(body, toy.model.identity, tests=tests)
    snapshot_id, _ = hostile_app.state.maskscope.store.put(snapshot)
    fetched = api.get(f"/api/permalinks/{snapshot_id}")
    assert fetched.status_code == 200, fetched.text  # a read: its tests judged in the background
    for _ in range(2000):  # a bounded poll, until the judgement is kept
        [result] = fetched.json()["test_results"]
        if result["status"] != "pending":
            break
        time.sleep(0.05)
        fetched = api.get(f"/api/permalinks/{snapshot_id}")
    assert result["status"] == "error" and result["error"]["pointer"] == pointer
    page = api.get(f"/s/{snapshot_id}")
    assert page.status_code == 200
    assert listener.connections == 0
    for answer in (fetched, page):
        assert SECRET not in answer.text and listener.secret not in answer.text


def test_a_backtracking_pattern_gets_its_verdicts_in_tests(api: TestClient) -> None:
    tests = [{"text": HOSTILE_TEXT, "expect": "fail"}] * 100
    response = api.post("/api/tests", json={"grammar": _grammar(BACKTRACKING), "tests": tests})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == 100
    expected = [{"path": "$", "message": f"{json.loads(HOSTILE_TEXT)!r} does not match '^(a+)+$'"}]
    assert all(r["schema"] == {"valid": False, "errors": expected} for r in results)
    assert all(r["passed"] and not r["grammar"]["accepted"] for r in results)


def test_a_backtracking_pattern_in_a_permalink_is_judged_when_shared_and_fetched(
    api: TestClient,
) -> None:
    tests = [{"text": HOSTILE_TEXT, "expect": "fail"}, {"text": '"aaaa"', "expect": "pass"}]
    body = {**session_body(grammar=_grammar(BACKTRACKING), max_tokens=5), "actions": [],
            "tests": tests}  # fmt: skip
    shared = api.post("/api/permalinks", json=body)
    assert shared.status_code in (200, 201), shared.text
    snapshot = api.get(f"/api/permalinks/{shared.json()['id']}").json()
    verdicts = [r["schema"]["valid"] for r in snapshot["test_results"]]
    assert verdicts == [False, True]
    assert [r["differs"] for r in snapshot["test_results"]] == [False, False]
    assert api.get(shared.json()["url"]).status_code == 200


def test_a_pattern_the_server_cannot_run_is_reported_not_passed(api: TestClient) -> None:
    # xgrammar compiles this object schema (it refuses backreferences itself, at compile time):
    # the schema's verdict names what could not be checked, and why
    pattern = r"^(?=a)a$"
    schema = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    tests = [{"text": '{"aa": 1}', "expect": "pass"}]
    response = api.post("/api/tests", json={"grammar": _grammar(schema), "tests": tests})
    assert response.status_code == 200, response.text
    verdict = response.json()["results"][0]["schema"]
    assert not verdict["valid"]
    [error] = verdict["errors"]
    assert error["path"] == "$"
    assert error["message"].startswith(f"pattern {pattern!r} could not be checked: it uses look")


def test_the_server_answers_health_checks_while_backtracking_patterns_are_judged(
    live_server: str,
) -> None:
    tests = [{"text": HOSTILE_TEXT, "expect": "fail"}] * 100
    answers: list[httpx.Response] = []

    def judge() -> None:
        body = {"grammar": _grammar(BACKTRACKING), "tests": tests}
        answers.append(httpx.post(f"{live_server}/api/tests", json=body, timeout=None))

    worker = threading.Thread(target=judge)
    worker.start()
    health = [httpx.get(f"{live_server}/healthz", timeout=None).status_code]
    while worker.is_alive():
        health.append(httpx.get(f"{live_server}/healthz", timeout=None).status_code)
    worker.join()
    assert set(health) == {200}
    [answer] = answers
    assert answer.status_code == 200
    assert [r["schema"]["valid"] for r in answer.json()["results"]] == [False] * 100


DEEP_TESTS = "[" * 100_000 + "]" * 100_000


def test_a_tests_field_nested_100k_deep_is_a_422_on_the_tests_panel(api: TestClient) -> None:
    form = {"tests": (None, DEEP_TESTS), "kind": (None, "json_schema"),
            "source": (None, json.dumps(BACKTRACKING))}  # fmt: skip
    response = api.post("/ui/tests", files=form)
    assert response.status_code == 422, response.text[:500]
    error = response.json()["error"]
    assert error == {"message": "tests: nested too deeply to parse", "code": "invalid_input",
                     "pointer": "/tests"}  # fmt: skip


def test_a_tests_field_nested_100k_deep_is_a_422_when_sharing(api: TestClient) -> None:
    session = api.post("/api/sessions", json=session_body(max_tokens=3))
    assert session.status_code == 200, session.text
    session_id = session.json()["id"]
    response = api.post(f"/ui/sessions/{session_id}/share", files={"tests": (None, DEEP_TESTS)})
    assert response.status_code == 422, response.text[:500]
    assert response.json()["error"]["pointer"] == "/tests"


@pytest.mark.parametrize("route", ["/api/tests", "/api/doctor"])
def test_allof_pointing_back_to_the_root_is_a_422(api: TestClient, route: str) -> None:
    grammar = _grammar({"type": "object", "allOf": [{"$ref": "#"}]})
    response = api.post(route, json=_request(route, grammar))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["pointer"] == "/allOf/0/$ref"


@pytest.mark.parametrize("route", ["/api/tests", "/api/doctor"])
def test_an_unresolvable_reference_is_a_422(api: TestClient, route: str) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}
    response = api.post(route, json=_request(route, _grammar(schema)))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["pointer"] == "/properties/a/$ref"
    assert (
        "'#/$defs/nope' is refused: its target '/$defs/nope' is not in the document"
        in (error["message"])
    )


@pytest.mark.parametrize("depth", [900, 20_000])
@pytest.mark.parametrize("route", ["/api/compile", "/api/tests", "/api/doctor"])
def test_a_schema_nested_too_deeply_is_a_422(api: TestClient, route: str, depth: int) -> None:
    source = '{"items": ' * depth + "{}" + "}" * depth
    grammar = {"kind": "json_schema", "source": source}
    response = api.post(route, json=_request(route, grammar))
    assert response.status_code == 422, response.text[:500]
    assert "nest" in response.json()["error"]["message"]
