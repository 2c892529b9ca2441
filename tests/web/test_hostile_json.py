"""Issue #46, item 2, through the app: a source holding an integer past CPython's 4,300-digit
limit is a 422 naming the number's pointer on every route, and the compile worker that saw it
serves on (the same process); a document holding one is judged; running out of memory while
serialising a compiled grammar is that request's 422, and the next request is served. Real
compile workers, the real Doctor and sandbox; the toy model (tests/web/toy_app.py), except where
the real vocabulary makes the grammar big enough to run out of memory."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine, GrammarCompiler
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.web.conftest import session_body

LONG = "1" * 5000
SOURCES = {
    "json_schema": (
        '{\n  "type": "object",\n  "properties": {"n": {"type": "integer", "maximum": '
        + LONG + "}}\n}",
        "/properties/n/maximum", 3, 54,
    ),
    "tools": (
        '{\n  "builder": "xgrammar", "format": "qwen_3",\n  "tools": [{"type": "function", '
        '"function": {"name": "f",\n    "parameters": {"type": "integer", "minimum": -'
        + LONG + "}}}]\n}",
        "/tools/0/function/parameters/minimum", 4, 50,  # the number starts at its sign
    ),
    "structural_tag": (
        '{"type": "structural_tag", "format": {"type": "json_schema",\n'
        ' "json_schema": {"enum": [1, ' + LONG + "]}}}",
        "/format/json_schema/enum/1", 2, 30,
    ),
}  # fmt: skip
ROUTES = [
    "/api/compile",
    "/api/replay",
    "/api/tests",
    "/api/doctor",
    "/api/export?target=vllm",
    "/api/sessions",
    "/api/permalinks",
]


@pytest.fixture(scope="module")
def hostile_app(toy: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    db_path = tmp_path_factory.mktemp("hostile-json") / "permalinks.db"
    return create_app(Settings(db_path=db_path, max_body_bytes=300_000), engine=toy)


@pytest.fixture(scope="module")
def api(hostile_app: FastAPI) -> Iterator[TestClient]:
    """A client that also reaches the page's routes; a 500 is an answer here, not a raise."""
    with TestClient(hostile_app, raise_server_exceptions=False) as test_client:
        yield as_page(test_client)


def _request(route: str, grammar: dict[str, Any]) -> dict[str, Any]:
    tests = [{"text": "1", "expect": "pass"}]
    return {
        "/api/compile": grammar,
        "/api/replay": {"grammar": grammar, "text": "1"},
        "/api/tests": {"grammar": grammar, "tests": tests},
        "/api/doctor": {"grammar": grammar, "budget_ms": 200},
        "/api/export?target=vllm": grammar,
        "/api/sessions": session_body(grammar=grammar, max_tokens=5),
        "/api/permalinks": {**session_body(grammar=grammar, max_tokens=5), "actions": [],
                            "tests": tests},
    }[route]  # fmt: skip


def _served(api: TestClient, tag: str) -> None:
    response = api.post("/api/compile", json={"kind": "regex", "source": f"[0-9]+{tag}"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("kind", list(SOURCES))
@pytest.mark.parametrize("route", ROUTES)
def test_an_integer_past_pythons_limit_is_a_422_naming_its_pointer_and_the_worker_serves_on(
    api: TestClient, toy: Engine, route: str, kind: str
) -> None:
    source, pointer, line, column = SOURCES[kind]
    _served(api, "warm")
    before = toy.compiler.worker_pids()
    response = api.post(route, json=_request(route, {"kind": kind, "source": source}))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "grammar_invalid"
    assert f"the integer at {pointer} has 5000 digits; at most 4300 are read" in error["message"]
    assert (error["line"], error["column"]) == (line, column)
    # the export service names the field the source came in, the number's pointer in words
    assert error["pointer"] == ("/grammar/source" if route.startswith("/api/export") and
                                kind == "json_schema" else pointer)  # fmt: skip
    _served(api, f"{kind}{len(route)}")
    assert toy.compiler.worker_pids() == before


@pytest.mark.parametrize("route", ["/api/compile", "/api/replay"])
def test_the_llguidance_engine_refuses_it_by_its_pointer_too(
    client: TestClient, route: str
) -> None:
    # The real model: llguidance takes a Hugging Face fast tokenizer, which the toy has not.
    source, pointer, line, column = SOURCES["json_schema"]
    grammar = {"kind": "json_schema", "source": source, "engine": "llguidance"}
    response = client.post(route, json=_request(route, grammar))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["pointer"], error["line"], error["column"]) == (pointer, line, column)


def test_a_request_body_holding_such_an_integer_is_a_400_naming_its_pointer(
    api: TestClient,
) -> None:
    body = '{"kind": "regex", "source": "a",\n "options": {"max_whitespace_cnt": ' + LONG + "}}"
    response = api.post("/api/compile", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "malformed",
        "message": "malformed JSON: the integer at /options/max_whitespace_cnt has 5000 digits; "
        "at most 4300 are read",
        "pointer": "/options/max_whitespace_cnt",
        "line": 2,
        "column": 36,
    }


def test_a_request_body_that_is_not_utf_8_is_a_400_naming_the_byte(api: TestClient) -> None:
    body = b'{"kind": "regex", "source": "a\xff"}'
    response = api.post("/api/compile", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "malformed",
        "message": "malformed JSON: the body is not UTF-8 (byte 0xff at 30)",
    }


def test_the_page_s_tests_with_such_an_integer_are_a_422_naming_it(api: TestClient) -> None:
    tests = '[{"text": "1", "expect": "pass", "note": ' + LONG + "}]"
    form = {"kind": "json_schema", "source": '{"type": "integer"}', "tests": tests}
    response = api.post("/ui/tests", data=form)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and error["pointer"] == "/tests"
    assert "the integer at /0/note has 5000 digits" in error["message"]


@pytest.fixture(scope="module")
def long_api(toy: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app on an engine that replays 8,192 tokens: a 5,000-digit document is walked."""
    settings = Settings(compile_workers=2, replay_max_tokens=8192)
    # the shared model and compiler; never closed here (closing an Engine closes its model)
    long_engine = Engine(toy.model, toy.compiler, settings, owns_compiler=False)
    db_path = tmp_path_factory.mktemp("long-json") / "permalinks.db"
    app = create_app(Settings(db_path=db_path, replay_max_tokens=8192), engine=long_engine)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield as_page(test_client)


def _judged(api: TestClient, schema: Any, text: str) -> dict[str, Any]:
    grammar = {"kind": "json_schema", "source": json.dumps(schema)}
    body = {"grammar": grammar, "tests": [{"text": text, "expect": "pass"}]}
    response = api.post("/api/tests", json=body)
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    return dict(result)


@pytest.mark.parametrize(
    ("schema", "valid", "message", "grammar"),
    [
        ({"type": "integer"}, True, None, True),
        ({"type": "integer", "minimum": 5}, True, None, True),
        ({"type": "string"},
         False, "11111111…11111111 (5000 digits) is not of type 'string'", False),
        ({"type": "integer", "maximum": 5},
         False, "11111111…11111111 (5000 digits) is greater than the maximum of 5", False),
        ({"type": "integer", "multipleOf": 3},
         False, "11111111…11111111 (5000 digits) is not a multiple of 3", True),
    ],
)  # fmt: skip
def test_a_test_document_holding_such_an_integer_is_judged(
    long_api: TestClient, schema: Any, valid: bool, message: str | None, grammar: bool
) -> None:
    result = _judged(long_api, schema, LONG)
    assert result["schema"]["valid"] is valid
    errors = result["schema"]["errors"]
    assert [e["message"] for e in errors] == ([message] if message else [])
    # the grammar walks the digits whatever Python's limit (xgrammar ignores multipleOf)
    assert result["grammar_as_written"]["accepted"] is grammar


def test_a_document_too_large_to_divide_by_a_float_multiple_of_gets_a_verdict_not_a_500(
    api: TestClient,
) -> None:
    result = _judged(api, {"type": "integer", "multipleOf": 0.5}, "1" * 400)
    assert result["grammar"]["accepted"] and result["grammar"]["complete"]
    assert result["schema"]["valid"] is False
    (error,) = result["schema"]["errors"]
    assert error["message"].startswith("the validator cannot judge this document")


def _big_ebnf(rules: int) -> str:
    """About 1 MB compiled, about 40 MB serialised (each rule's class splits the vocabulary)."""
    rnd = random.Random(0)
    body = [
        f'r{i} ::= [{"".join(rnd.sample(string.ascii_lowercase, 13))}]+ "{i}"' for i in range(rules)
    ]
    return "root ::= " + " | ".join(f"r{i}" for i in range(rules)) + "\n" + "\n".join(body)


@pytest.fixture(scope="module")
def capped_api(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app on compile workers capped at 128 MB: compiling the big grammar fits, serialising
    it for its token masks does not."""
    settings = Settings(compile_workers=2, compile_memory_mb=128)
    compiler = GrammarCompiler.from_settings(engine.model.tokens.info, settings)
    capped = Engine(engine.model, compiler, settings, owns_compiler=False)
    db_path = tmp_path_factory.mktemp("capped") / "permalinks.db"
    app = create_app(Settings(db_path=db_path, compile_memory_mb=128), engine=capped)
    try:
        with TestClient(app, raise_server_exceptions=False) as test_client:
            yield as_page(test_client)
    finally:
        compiler.close()


def test_running_out_of_memory_serialising_a_grammar_is_its_422_and_the_next_is_served(
    capped_api: TestClient,
) -> None:
    big = {"kind": "ebnf", "source": _big_ebnf(200)}
    assert capped_api.post("/api/compile", json=big).status_code == 200  # held by its worker
    response = capped_api.post("/api/replay", json={"grammar": big, "text": "abc0"})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == {
        "code": "grammar_too_complex",
        "message": "too complex: serialising the compiled grammar (for its token masks) needed "
        "more memory than a compile may use (128 MB)",
    }
    for tag in "xyz":  # the next requests, one of them where the retired worker was
        small = {"kind": "regex", "source": f"[0-9]+{tag}"}
        replayed = capped_api.post("/api/replay", json={"grammar": small, "text": f"12{tag}"})
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["complete"] is True
