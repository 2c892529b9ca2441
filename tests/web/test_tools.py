"""The ``tools`` kind over HTTP on the real model, real xgrammar and the real sandbox: the compile
answer's fields, located errors, ``$model`` parameters, the router example's session writing a
call whose arguments validate, replay, permalinks, tests, export and the Doctor."""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.examples import EXAMPLES_DIR, load_tool_examples
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

EXAMPLES = {e.id: e for e in load_tool_examples()}
ROUTER = EXAMPLES["router_tools"]
ROUTER_TOOLS = json.loads(ROUTER.source())
CALL = re.compile(r'<tool_call>\n\{"name": "(\w+)", "arguments": (.*)\}\n</tool_call>', re.S)


def grammar(data: Any = None, **extra: Any) -> dict[str, Any]:
    source = ROUTER.source() if data is None else json.dumps(data, indent=2)
    return {"kind": "tools", "source": source, **extra}


def router_session(**extra: Any) -> dict[str, Any]:
    return {
        "grammar": grammar(),
        "messages": [
            {"role": "system", "content": ROUTER.system},
            {"role": "user", "content": ROUTER.prompt},
        ],
        "max_tokens": ROUTER.max_tokens,
        **extra,
    }


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    directory = tmp_path_factory.mktemp("tools")
    return create_app(Settings(db_path=directory / "p.db", cache_dir=directory), engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield as_page(test_client)


@pytest.fixture(scope="module")
def router_run(client: TestClient) -> dict[str, Any]:
    """The router example's session, run to its end (once for the module)."""
    session_id = client.post("/api/sessions", json=router_session()).json()["id"]
    answer: dict[str, Any] = client.post(
        f"/api/sessions/{session_id}/step", json={"n": ROUTER.max_tokens}
    ).json()
    answer["id"] = session_id
    return answer


def _error(client: TestClient, data: Any, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/compile", json=grammar(data, **extra))
    assert response.status_code == 422, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_the_compile_answer_has_the_tag_what_it_leaves_free_and_the_versions(
    client: TestClient,
) -> None:
    answer = client.post("/api/compile", json=grammar(options={"preset": "vllm"})).json()
    tag = answer["structural_tag"]
    assert tag["type"] == "structural_tag" and answer["no_tag_reason"] is None
    assert "fetch_user_features" in answer["grammar"] and "respond" in answer["grammar"]
    # required, one call: the tag leaves nothing free
    assert answer["unconstrained"] == ["nothing: every part of the output is constrained"]
    assert answer["builder_versions"]["xgrammar"] == "0.2.9"
    assert answer["reasoning_end"] is None and answer["builder_notes"] == []
    assert answer["not_carried"][0] == "preset" and answer["json_schema"] is None
    loose = copy.deepcopy(ROUTER_TOOLS)
    loose["tools"][1]["function"]["strict"] = False
    loose.update(tool_choice="auto", parallel_tool_calls=True, strict_level="all")
    answer = client.post("/api/compile", json=grammar(loose)).json()
    assert "arguments of respond: any JSON" in answer["unconstrained"]
    assert any(s.startswith("free text before, between and after") for s in answer["unconstrained"])
    assert "strict_level" in answer["not_carried"] and answer["builder_notes"]


def test_bad_fields_are_422_with_their_pointer(client: TestClient) -> None:
    bad = copy.deepcopy(ROUTER_TOOLS)
    bad["tool_choice"] = {"type": "function", "function": {"name": "lookup"}}
    error = _error(client, bad)
    assert error["pointer"] == "/tool_choice/function/name" and error["code"] == "grammar_invalid"
    assert error["line"] == next(
        n for n, line in enumerate(grammar(bad)["source"].splitlines(), 1) if '"lookup"' in line
    )
    bad = copy.deepcopy(ROUTER_TOOLS)
    del bad["tools"][1]["function"]["name"]
    assert _error(client, bad)["pointer"] == "/tools/1/function"
    bad = copy.deepcopy(ROUTER_TOOLS)
    bad["format"] = "hermes"
    assert "unknown format 'hermes' for the xgrammar builder" in _error(client, bad)["message"]
    bad = copy.deepcopy(ROUTER_TOOLS)
    bad["tools"][0]["function"]["parameters"]["properties"]["user_id"]["pattern"] = 5
    error = _error(client, bad)
    assert error["pointer"] == "/tools/0/function/parameters/properties/user_id/pattern"


def test_a_model_of_the_pydantic_field_is_derived_in_the_sandbox(client: TestClient) -> None:
    data = copy.deepcopy(ROUTER_TOOLS)
    data["pydantic"] = (EXAMPLES_DIR / "router.py").read_text(encoding="utf-8")
    data["tools"][0]["function"]["parameters"] = {"$model": "FetchUserFeatures"}
    answer = client.post("/api/compile", json=grammar(data)).json()
    (leaf,) = [
        t["content"]["json_schema"]
        for t in answer["structural_tag"]["format"]["tags"]
        if "fetch_user_features" in t["begin"]
    ]
    assert leaf["title"] == "FetchUserFeatures" and leaf["properties"]["user_id"]["pattern"]
    data["tools"][0]["function"]["parameters"] = {"$model": "Nope"}
    error = _error(client, data)
    assert error["pointer"] == "/tools/0/function/parameters/$model"
    assert "no model named 'Nope'" in error["message"]


def test_the_router_example_writes_a_call_whose_arguments_validate(
    router_run: dict[str, Any],
) -> None:
    assert router_run["done"] and router_run["stop_reason"] == "terminated", router_run["text"]
    match = CALL.fullmatch(router_run["text"])
    assert match, router_run["text"]
    name, arguments = match[1], json.loads(match[2])
    (tool,) = [t for t in ROUTER_TOOLS["tools"] if t["function"]["name"] == name]
    jsonschema.validate(arguments, tool["function"]["parameters"])
    assert router_run["validation"]["valid"] is True


def test_the_calls_text_replays_and_a_wrong_argument_is_refused(
    client: TestClient, router_run: dict[str, Any]
) -> None:
    text = router_run["text"]
    replay = client.post("/api/replay", json={"grammar": grammar(), "text": text}).json()
    assert replay["accepted"] and replay["complete"]
    start = '<tool_call>\n{"name": "fetch_user_features", "arguments": {"rationale": "x", '
    refused = client.post(
        "/api/replay", json={"grammar": grammar(), "text": start + '"user_id": "x1"'}
    ).json()
    assert not refused["accepted"]
    assert refused["rejection"]["offset"] == len(start + '"user_id": "')


def test_llguidance_refuses_the_tools_tag(client: TestClient) -> None:
    error = _error(client, ROUTER_TOOLS, engine="llguidance")
    assert "llguidance cannot mask this structural tag" in error["message"]


def test_a_permalink_reopens_the_same_trace(client: TestClient) -> None:
    body = {**router_session(), "actions": [{"op": "step", "n": 8}]}
    shared = client.post("/api/permalinks", json=body)
    assert shared.status_code == 201, shared.text
    snapshot_id = shared.json()["id"]
    stored = client.get(f"/api/permalinks/{snapshot_id}").json()
    assert stored["request"]["grammar"]["kind"] == "tools"
    reopened = client.post(f"/api/permalinks/{snapshot_id}/session").json()
    text = "".join(s["token_text"] for s in reopened["steps"])
    assert len(reopened["steps"]) == 8 and text.startswith("<tool_call>")


def test_tests_export_and_the_doctor_take_the_kind(client: TestClient) -> None:
    call = '<tool_call>\n{"name": "respond", "arguments": {"content": "Hi"}}\n</tool_call>'
    tests = [{"text": call, "expect": "pass"}, {"text": "Hello", "expect": "fail"}]
    results = client.post("/api/tests", json={"grammar": grammar(), "tests": tests}).json()
    assert [r["passed"] for r in results["results"]] == [True, True]
    for target in ("vllm", "sglang", "xgrammar", "llguidance", "openai"):
        answer = client.post(f"/api/export?target={target}", json=router_session())
        assert answer.status_code == 200, (target, answer.text)
        out = answer.json()
        if out["language"] == "python":
            ast.parse(out["code"])
    xgrammar = client.post("/api/export?target=xgrammar", json=router_session()).json()
    assert (
        "compile_structural_tag(TAG)" in xgrammar["code"]
        and "fetch_user_features" in (xgrammar["code"])
    )
    report = client.post("/api/doctor", json={"grammar": grammar(), "budget_ms": 200})
    assert report.status_code == 200, report.text


def test_the_reasoning_example_calls_once_its_reasoning_ends(client: TestClient) -> None:
    example = EXAMPLES["reasoning_tools"]
    body = {
        "grammar": {"kind": "tools", "source": example.source()},
        "messages": [
            {"role": "system", "content": example.system},
            {"role": "user", "content": example.prompt},
        ],
        "max_tokens": example.max_tokens,
    }
    session_id = client.post("/api/sessions", json=body).json()["id"]
    answer = client.post(f"/api/sessions/{session_id}/step", json={"n": example.max_tokens}).json()
    reasoning, marker, rest = answer["text"].partition("</think>")
    assert marker and answer["stop_reason"] == "terminated", answer["text"]
    match = CALL.fullmatch(rest.removeprefix("\n\n"))
    assert match and match[1] == "get_weather", rest
    tool = json.loads(example.source())["tools"][0]["function"]
    jsonschema.validate(json.loads(match[2]), tool["parameters"])
