"""The ``request`` kind (issue #40, item 3): a Chat Completions body as sent to vLLM, with its
``vllm serve`` flags, derived by each real vLLM release's own code on the request model's
tokenizer: the prompt, the grammar its engine masks with, the reasoning end, the end rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.main import main
from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.engine.stepper.test_tokenizer_replay import WEATHER
from tests.web.test_tokenizer_models import loaded

pytestmark = pytest.mark.server

ASK = [{"role": "user", "content": "The weather in Paris?"}]
#: A request shaped like vLLM #46149's: a required tool call, the qwen3 reasoning parser.
TOOLS_REQUEST = {
    "body": {"messages": ASK, "tools": [WEATHER], "tool_choice": "required", "min_tokens": 2},
    "serve": {"tool_call_parser": "hermes", "reasoning_parser": "qwen3"},
}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
SCHEMA_REQUEST = {
    "body": {
        "messages": ASK,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
        "stop_token_ids": [2],
    }
}


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(db_path=tmp_path_factory.mktemp("request") / "p.db", compile_workers=1)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        loaded(test_client, "qwen3.6")
        yield test_client


def _compile(client: TestClient, request: Any, model: str = "qwen3.6") -> Any:
    source = request if isinstance(request, str) else json.dumps(request)
    grammar = {"kind": "request", "source": source}
    return client.post("/api/compile", json={**grammar, "model": model})


def test_a_tools_request_is_the_tag_vllms_server_builds_and_the_prompt_it_renders(
    client: TestClient,
) -> None:
    answer = _compile(client, TOOLS_REQUEST)
    assert answer.status_code == 200, answer.text
    derived = answer.json()["derived"]
    assert derived["kind"] == "structural_tag" and derived["stack"] == "vllm-0.32.0"
    assert derived["reasoning_end"] == "</think>" and derived["min_tokens"] == 2
    # Qwen's template, as vLLM's renderer ran it: the tools in the system turn, the assistant's
    # turn opened with its thinking
    prompt = derived["prompt"]
    assert '"name": "get_weather"' in prompt and prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert 0 < derived["prompt_tokens"] < len(prompt)
    # The same vLLM code, reached through a tools source, builds the same tag.
    tools_source = {
        "builder": "vllm", "format": "hermes", "tools": [WEATHER], "tool_choice": "required",
        "reasoning_parser": "qwen3",
    }  # fmt: skip
    built = client.post(
        "/api/compile",
        json={"kind": "tools", "source": json.dumps(tools_source), "model": "qwen3.6"},
    )
    assert built.status_code == 200, built.text
    assert json.loads(derived["source"]) == built.json()["structural_tag"]


def test_each_release_derives_with_its_own_code(client: TestClient) -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for stack in ("vllm-0.32.0", "vllm-0.34.0"):
        grammar = {"kind": "request", "source": json.dumps(TOOLS_REQUEST)}
        body = {"grammar": grammar, "model": "qwen3.6", "stack": stack, "text": text}
        answer = client.post("/api/replay", json=body)
        assert answer.status_code == 200, answer.text
        replay = answer.json()
        assert replay["accepted"], (stack, replay.get("refused_at"))
        assert replay["mask_by"]["stack"] == stack


@pytest.mark.parametrize("stack", ["vllm-0.32.0", "vllm-0.34.0"])
def test_a_replay_runs_under_the_requests_own_reasoning_parser(
    client: TestClient, stack: str
) -> None:
    # vLLM #46149's ids: `</think>`, `\n\n`, `<tool_call>`, `\n`. Its --reasoning-parser qwen3
    # ends the reasoning on `</think>` (never fed to the grammar); the blank line is refused.
    grammar = {"kind": "request", "source": json.dumps(TOOLS_REQUEST)}
    ids = [248069, 271, 248058, 198]
    body = {"grammar": grammar, "model": "qwen3.6", "stack": stack, "token_ids": ids}
    answer = client.post("/api/replay", json=body)
    assert answer.status_code == 200, answer.text
    first, second = answer.json()["tokens"][:2]
    assert first["accepted"] and not first["masked"]
    assert not second["accepted"]


def test_a_response_format_is_the_json_schema_vllm_hands_its_engine(client: TestClient) -> None:
    answer = _compile(client, SCHEMA_REQUEST, model="local")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    derived = body["derived"]
    assert derived["kind"] == "json_schema" and json.loads(derived["source"]) == SCHEMA
    assert derived["stop_token_ids"] == [2] and derived["reasoning_end"] is None
    assert derived["prompt"].startswith("<|im_start|>") and derived["prompt_tokens"] > 5
    assert "root ::=" in body["grammar"]
    grammar = {"kind": "request", "source": json.dumps(SCHEMA_REQUEST)}
    replay = client.post("/api/replay", json={"grammar": grammar, "text": '{"a": 1}'})
    assert replay.status_code == 200 and replay.json()["accepted"], replay.text


def test_choices_are_the_grammar_vllms_backend_makes_of_them(client: TestClient) -> None:
    request = {"body": {"messages": ASK, "structured_outputs": {"choice": ["yes", "no"]}}}
    answer = _compile(client, request, model="local")
    assert answer.status_code == 200, answer.text
    derived = answer.json()["derived"]
    assert derived["kind"] == "ebnf" and derived["source"] == 'root ::= "yes" | "no"'


@pytest.mark.parametrize(
    ("request_source", "pointer", "says"),
    [
        ({"body": {"messages": "hi"}}, "/body/messages", "vLLM refuses the request"),
        (
            {**TOOLS_REQUEST, "serve": {"tool_call_parser": "nope"}},
            "/serve/tool_call_parser",
            "vLLM has no tool parser 'nope'",
        ),
        ({**TOOLS_REQUEST, "serve": {"nope": 1}}, "/serve/nope", "unknown serve flag 'nope'"),
        ({"body": {"messages": ASK}}, "/body", "vLLM constrains nothing in this request"),
        ({"messages": ASK}, "/messages", "unknown field 'messages'"),
    ],
)
def test_a_bad_request_is_refused_where_it_is_wrong(
    client: TestClient, request_source: Any, pointer: str, says: str
) -> None:
    answer = _compile(client, json.dumps(request_source, indent=2))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["pointer"] == pointer and says in error["message"], error


def test_the_command_line_replays_a_request_under_a_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "request.json"
    source.write_text(json.dumps(TOOLS_REQUEST))
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    text = f"{call}<|im_end|>"  # complete: the call, then the end of the turn
    command = ["replay", "--kind", "request", "--schema", str(source), "--model", "qwen3.6",
               "--stack", "vllm-0.34.0", "--text", text]  # fmt: skip
    assert main(command) == 0, capsys.readouterr()
    assert main([*command[:-1], "Paris is sunny."]) == 1
