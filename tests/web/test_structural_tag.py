"""The ``structural_tag`` kind over HTTP: compile, located errors, sessions, replay, tests,
permalinks and export, on the real model with real xgrammar and llguidance."""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

ARGS = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TAG: dict[str, Any] = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [
            {"type": "regex", "pattern": "(Yes|No)\\. "},
            {
                "type": "tag",
                "begin": "<call>",
                "content": {"type": "json_schema", "json_schema": ARGS, "max_whitespace_cnt": 1},
                "end": "</call>",
            },
        ],
    },
}
LEGACY: dict[str, Any] = {
    "structures": [{"begin": "<weather>", "schema": ARGS, "end": "</weather>"}],
    "triggers": ["<weather>"],
}
MESSAGES = [{"role": "user", "content": "Should I pack a coat for Oslo? Answer, then call."}]


def grammar(tag: Any = TAG, **extra: Any) -> dict[str, Any]:
    """A grammar request for ``tag`` (written with an indent, so lines mean something)."""
    source = tag if isinstance(tag, str) else json.dumps(tag, indent=2)
    return {"kind": "structural_tag", "source": source, **extra}


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    db = tmp_path_factory.mktemp("stag") / "permalinks.db"
    return create_app(Settings(db_path=Path(db)), engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield as_page(test_client)


def _error(client: TestClient, tag: Any) -> dict[str, Any]:
    response = client.post("/api/compile", json=grammar(tag))
    assert response.status_code == 422, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _line_of(source: str, needle: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), 1) if needle in line)


def test_a_tag_compiles_with_its_grammar_and_lists_the_options_it_ignores(
    client: TestClient,
) -> None:
    body = grammar(options={"preset": "vllm", "indent": 2})
    answer = client.post("/api/compile", json=body).json()
    assert '"<call>"' in answer["grammar"] and '"</call>"' in answer["grammar"]
    assert "Yes" in answer["grammar"]  # the regex leaf
    assert answer["not_carried"] == [
        "preset", "any_whitespace", "strict_mode", "indent", "separators", "max_whitespace_cnt"
    ]  # fmt: skip
    assert answer["json_schema"] is None and answer["engine"] == "xgrammar"


def test_a_legacy_tag_is_converted(client: TestClient) -> None:
    answer = client.post("/api/compile", json=grammar(LEGACY)).json()
    assert '"<weather>"' in answer["grammar"] and "Oslo" in answer["grammar"]


def test_a_wrong_type_deep_inside_points_at_its_object(client: TestClient) -> None:
    bad = copy.deepcopy(TAG)
    bad["format"]["elements"][1]["content"]["type"] = "jsonschema"
    error = _error(client, bad)
    assert error["pointer"] == "/format/elements/1/content"
    assert "'jsonschema'" in error["message"] and error["code"] == "grammar_invalid"
    source = grammar(bad)["source"]
    assert error["line"] == _line_of(source, '"content": {')


def test_a_missing_field_and_a_wrong_union_point_at_their_place(client: TestClient) -> None:
    bad = copy.deepcopy(TAG)
    del bad["format"]["elements"][0]["pattern"]
    error = _error(client, bad)
    assert (
        error["pointer"] == "/format/elements/0" and "missing field 'pattern'" in error["message"]
    )
    bad = copy.deepcopy(TAG)
    bad["format"]["elements"][1]["end"] = 5
    assert _error(client, bad)["pointer"] == "/format/elements/1/end"


def test_a_bad_schema_leaf_points_inside_the_schema(client: TestClient) -> None:
    bad = copy.deepcopy(TAG)
    bad["format"]["elements"][1]["content"]["json_schema"]["properties"]["city"]["type"] = "str"
    error = _error(client, bad)
    assert error["pointer"] == "/format/elements/1/content/json_schema/properties/city/type"
    assert error["line"] == _line_of(grammar(bad)["source"], '"type": "str"')
    bad["format"]["elements"][1]["content"]["json_schema"]["properties"]["city"] = {"$ref": "#/x"}
    error = _error(client, bad)  # valid JSON Schema, refused by xgrammar: the leaf alone places it
    assert error["pointer"] == "/format/elements/1/content/json_schema/properties/city"
    assert error["message"].startswith("json_schema leaf:")


def test_a_bad_regex_leaf_points_at_its_pattern(client: TestClient) -> None:
    bad = copy.deepcopy(TAG)
    bad["format"]["elements"][0]["pattern"] = "(Yes|No"
    error = _error(client, bad)
    assert error["pointer"] == "/format/elements/0/pattern"
    assert error["message"].startswith("regex leaf:")
    source = grammar(bad)["source"]
    line = source.splitlines()[error["line"] - 1]
    assert error["line"] == _line_of(source, '"pattern": "(Yes|No"')
    assert line[: error["column"]].endswith('"(Yes|No')  # at the end of the pattern


def test_a_legacy_error_points_into_the_legacy_form(client: TestClient) -> None:
    bad = copy.deepcopy(LEGACY)
    bad["structures"][0]["schema"] = {"type": "obj"}
    assert _error(client, bad)["pointer"] == "/structures/0/schema/type"
    del bad["structures"][0]["end"]
    error = _error(client, bad)
    assert error["pointer"] == "/structures/0" and "missing field 'end'" in error["message"]


def test_malformed_json_has_line_and_column(client: TestClient) -> None:
    error = _error(client, '{"type": "structural_tag",\n  "format": {"type": "regex",}}')
    assert error["message"].startswith("invalid JSON") and (error["line"], error["column"]) == (
        2,
        30,
    )
    assert _error(client, "[1, 2]")["message"] == "a structural tag is a JSON object, not an array"


def test_llguidance_says_it_cannot_take_a_tag_of_the_current_form(client: TestClient) -> None:
    response = client.post("/api/compile", json=grammar(engine="llguidance"))
    assert response.status_code == 422
    error = response.json()["error"]
    assert "llguidance cannot mask this structural tag" in error["message"]
    assert "legacy" in error["message"] and error["pointer"] == "/format"
    body = {"grammar": grammar(), "text": "Yes. ", "compare": "llguidance"}
    response = client.post("/api/replay", json=body)
    assert response.status_code == 422
    assert "llguidance cannot mask this structural tag" in response.json()["error"]["message"]


#: A legacy tag whose trigger is text (not <...>, which llguidance reads as a special token).
FUNCTION_TAG: dict[str, Any] = {
    "structures": [{"begin": "<function=weather>", "schema": ARGS, "end": "</function>"}],
    "triggers": ["<function="],
}


def test_a_legacy_tag_replays_under_llguidance_and_in_compare_mode(client: TestClient) -> None:
    good = 'Cold. <function=weather>{"city": "Oslo"}</function>'
    bad = 'Cold. <function=weather>{"town": 3}</function>'
    compiled = client.post("/api/compile", json=grammar(FUNCTION_TAG, engine="llguidance"))
    assert compiled.status_code == 200, compiled.text
    assert any("the arguments are any JSON" in w for w in compiled.json()["warnings"])
    for text in (good, bad):  # vLLM's guidance backend does not apply the schema
        body = {"grammar": grammar(FUNCTION_TAG, engine="llguidance"), "text": text}
        answer = client.post("/api/replay", json=body).json()
        assert answer["accepted"] and answer["complete"], text
    body = {"grammar": grammar(FUNCTION_TAG), "text": bad, "compare": "llguidance"}
    answer = client.post("/api/replay", json=body).json()
    assert not answer["accepted"]  # xgrammar applies the schema: "town" is refused
    assert answer["rejection"]["offset"] == bad.index("town")
    assert answer["follower"]["engine"] == "llguidance" and answer["follower"]["accepted"]
    body = {"grammar": grammar(FUNCTION_TAG), "text": good, "compare": "llguidance"}
    answer = client.post("/api/replay", json=body).json()
    assert answer["accepted"] and answer["follower"]["accepted"]


def test_a_trigger_written_like_a_special_token_the_model_lacks_is_located(
    client: TestClient,
) -> None:
    response = client.post("/api/compile", json=grammar(LEGACY, engine="llguidance"))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["pointer"] == "/triggers/0" and "<[id]>" in error["message"]


def test_a_session_writes_under_the_tag_and_its_text_replays(client: TestClient) -> None:
    body = {"grammar": grammar(), "messages": MESSAGES, "max_tokens": 40}
    session_id = client.post("/api/sessions", json=body).json()["id"]
    answer = client.post(f"/api/sessions/{session_id}/step", json={"n": 40}).json()
    text = answer["text"]
    assert re.fullmatch(r'(Yes|No)\. <call>\{\s?"city":\s?"(Paris|Oslo)"\s?\}</call>', text), text
    assert answer["done"] and answer["stop_reason"] == "terminated"
    assert answer["validation"]["valid"] is True
    replay = client.post("/api/replay", json={"grammar": grammar(), "text": text}).json()
    assert replay["accepted"] and replay["complete"]
    refused = client.post(
        "/api/replay", json={"grammar": grammar(), "text": 'Yes. <call>{"city": "Rome"}'}
    ).json()
    assert not refused["accepted"] and refused["rejection"]["offset"] == len(
        'Yes. <call>{"city": "'
    )


def test_schema_tests_judge_by_the_grammar_with_a_null_schema_verdict(client: TestClient) -> None:
    tests = [
        {"text": 'No. <call>{"city": "Paris"}</call>', "expect": "pass"},
        {"text": 'No. <call>{"city": "Rome"}</call>', "expect": "fail"},
    ]
    results = client.post("/api/tests", json={"grammar": grammar(), "tests": tests}).json()
    assert [r["grammar"]["accepted"] for r in results["results"]] == [True, False]
    assert all(r["passed"] and r["schema"] is None for r in results["results"])


def test_a_permalink_round_trip(client: TestClient) -> None:
    body = {"grammar": grammar(), "messages": MESSAGES, "max_tokens": 40,
            "actions": [{"op": "step", "n": 6}]}  # fmt: skip
    shared = client.post("/api/permalinks", json=body)
    assert shared.status_code == 201, shared.text
    snapshot_id = shared.json()["id"]
    assert (
        client.get(f"/api/permalinks/{snapshot_id}").json()["request"]["grammar"]["kind"]
        == "structural_tag"
    )
    reopened = client.post(f"/api/permalinks/{snapshot_id}/session").json()
    assert len(reopened["steps"]) == 6
    assert "".join(s["token_text"] for s in reopened["steps"]).startswith(("Yes", "No"))


def test_export_sends_the_tag_as_a_structural_tag(client: TestClient) -> None:
    body = {"grammar": grammar(), "messages": MESSAGES, "max_tokens": 40}

    def export(target: str, request: dict[str, Any] = body) -> dict[str, Any]:
        answer = client.post(f"/api/export?target={target}", json=request)
        assert answer.status_code == 200, (target, answer.text)
        out: dict[str, Any] = answer.json()
        if out["language"] == "python":
            ast.parse(out["code"])
        return out

    vllm = export("vllm")
    assert '"structural_tag": json.dumps(TAG)' in vllm["code"] and not vllm["not_expressible"]
    assert "compile_structural_tag(TAG)" in export("xgrammar")["code"]
    assert '"structural_tag": json.dumps(TAG)' in export("sglang")["code"]
    assert "response_format=TAG" in export("sglang_openai")["code"]
    assert '\\"<call>\\"' in export("curl_vllm")["code"]  # the tag as a JSON string in JSON
    for target in ("vllm_legacy", "llguidance", "openai"):
        assert any("not constrained" in x for x in export(target)["not_expressible"]), target
    legacy = export("vllm", {**body, "grammar": grammar(LEGACY)})["code"]
    assert "triggered_tags" in legacy  # sent as compiled: converted to the current form


def test_the_llguidance_export_of_a_legacy_tag_builds_it_as_vllms_guidance_backend(
    client: TestClient,
) -> None:
    body = {"grammar": grammar(FUNCTION_TAG), "messages": MESSAGES, "max_tokens": 40}
    answer = client.post("/api/export?target=llguidance", json=body).json()
    assert answer["not_expressible"] == []
    assert "llguidance.StructTag.to_grammar" in answer["code"]
    assert ast.literal_eval(_constant(answer["code"], "TAG")) == FUNCTION_TAG  # as written


def _constant(code: str, name: str) -> str:
    statement = next(
        s for s in ast.parse(code).body
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == name
    )  # fmt: skip
    return ast.unparse(statement.value)


def test_the_doctor_examines_the_json_schema_leaves(client: TestClient) -> None:
    report = client.post("/api/doctor", json={"grammar": grammar()}).json()  # counts bound it
    assert {k["pointer"] for k in report["keywords"]} >= {
        "/format/elements/1/content/json_schema/properties/city/enum"
    }
    assert all(k["line"] is not None for k in report["keywords"])
    assert [b["backend"] for b in report["backends"]] == ["xgrammar", "vllm", "llguidance"]
    assert report["costs"]["size_bytes"] > 0 and report["costs"]["compile_ms"] >= 0
    shortest = report["costs"]["shortest_document"]
    assert shortest is None or "<call>" in shortest
