"""The template round trip over HTTP (issue #42): ``POST /api/roundtrip`` and the Doctor's
``template_refused`` finding, on the real Qwen3.6 tokenizer and vLLM 0.32.0's own hermes tag;
a tools source's pasted ``chat_template``; and a pasted request's end rules in a replay, under
the default stack and under a vLLM stack."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.engine.stepper.test_tokenizer_replay import WEATHER
from tests.web.test_tokenizer_models import loaded

pytestmark = pytest.mark.server  # vLLM's tools runner and stacks: real processes

HERMES = (
    Path(__file__).resolve().parent.parent / "fixtures" / "templates" / "qwen3.jinja"
).read_text()
#: A hermes-style template that writes parallel calls with nothing between them (as the tag
#: joins them), and no reasoning: its turns round-trip.
JOINED = (
    "{%- for m in messages %}{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{% for c in m.tool_calls %}"
    "<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n"
    "</tool_call>{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TERMINAL = {"enum": ["yes"]}
ASK = [{"role": "user", "content": "Yes?"}]


def _tools(template: str | None = HERMES, **extra: Any) -> dict[str, Any]:
    source = {"builder": "vllm", "format": "hermes", "tools": [WEATHER],
              "tool_choice": "required", "strict_tool_calling": True, **extra}  # fmt: skip
    if template is not None:
        source["chat_template"] = template
    return {"kind": "tools", "source": json.dumps(source)}


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(db_path=tmp_path_factory.mktemp("roundtrip") / "p.db", compile_workers=1)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        loaded(test_client, "qwen3.6")
        yield test_client


def _roundtrip(client: TestClient, **body: Any) -> Any:
    return client.post("/api/roundtrip", json={"model": "qwen3.6", **body})


@pytest.mark.parametrize("stack", ["maskscope", "vllm-0.32.0"])
def test_the_hermes_tag_refuses_the_newline_between_two_calls(
    client: TestClient, stack: str
) -> None:
    answer = _roundtrip(client, grammar=_tools(), stack=stack)
    assert answer.status_code == 200, answer.text
    cases = {case["case"]: case for case in answer.json()}
    assert set(cases) == {"one_call", "parallel"}  # no reasoning parser: no reasoning cases
    assert cases["one_call"]["accepted"] and cases["one_call"]["tool"] == "get_weather"
    two = cases["parallel"]
    assert not two["accepted"]
    rendered = two["rendered"]
    assert two["offset"] == rendered.find("</tool_call>\n<tool_call>") + len("</tool_call>")
    assert two["template_wrote"].startswith("\n<tool_call>")
    assert "<tool_call>" in two["tag_allows"]


def test_an_example_call_is_rendered_too(client: TestClient) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    answer = _roundtrip(client, grammar=_tools(), calls=[call])
    assert answer.status_code == 200, answer.text
    (example,) = [case for case in answer.json() if case["case"] == "example"]
    assert example["accepted"], example
    assert '{"city": "Paris"}' in example["rendered"]


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"grammar": _tools(), "calls": [{"name": "nope", "arguments": {}}]}, "/calls/0/name"),
        ({"grammar": {"kind": "json_schema", "source": "{}"}}, "/grammar/kind"),
        ({"grammar": _tools(), "stack": "vllm-9.9.9"}, "/stack"),
        ({"grammar": _tools(), "calls": [{"name": "get_weather"}]}, "/calls/0/arguments"),
    ],
)
def test_a_bad_body_is_a_422_with_a_pointer(
    client: TestClient, body: dict[str, Any], pointer: str
) -> None:
    answer = _roundtrip(client, **body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["pointer"] == pointer


def test_a_pasted_template_is_the_one_rendered(client: TestClient) -> None:
    answer = _roundtrip(client, grammar=_tools(JOINED))
    assert answer.status_code == 200, answer.text
    cases = {case["case"]: case for case in answer.json()}
    assert all(case["accepted"] for case in cases.values()), cases
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a"}}\n</tool_call>'
    assert cases["parallel"]["rendered"] == call + call


@pytest.mark.parametrize(
    "template", ["{% if %}", "{{ raise_exception('this template renders no tools') }}"]
)
def test_a_broken_template_is_a_422_at_chat_template(client: TestClient, template: str) -> None:
    answer = _roundtrip(client, grammar=_tools(template))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["pointer"] == "/chat_template"


def _findings(client: TestClient, grammar: dict[str, Any]) -> list[dict[str, Any]]:
    answer = client.post("/api/doctor", json={"grammar": grammar, "model": "qwen3.6"})
    assert answer.status_code == 200, answer.text
    findings: list[dict[str, Any]] = answer.json()["findings"]
    return findings


def test_the_doctor_finds_that_the_grammar_refuses_the_models_own_format(
    client: TestClient,
) -> None:
    refused = [f for f in _findings(client, _tools()) if f["direction"] == "template_refused"]
    assert len(refused) == 1, refused
    (finding,) = refused
    assert finding["cause"].startswith("the grammar refuses the model's own format")
    offset = finding["example"].find("</tool_call>\n<tool_call>") + len("</tool_call>")
    assert finding["span"] == [offset, offset + 1]
    assert finding["pointers"] == ["/chat_template"] and "<tool_call>" in finding["note"]
    joined = _findings(client, _tools(JOINED))
    assert not [f for f in joined if f["direction"] == "template_refused"], joined


def test_the_doctor_tab_shows_the_refused_format(client: TestClient) -> None:
    form = {**_tools(), "model": "qwen3.6"}
    html = as_page(client).post("/ui/doctor", data=form).text
    finding = html[html.index('data-direction="template_refused"') :]
    assert "the grammar refuses the model&#39;s own format" in finding.split("</p>", 1)[0]
    assert "the tag refuses the turn at offset" in finding


def _terminal_request(**body: Any) -> dict[str, Any]:
    schema = {"name": "yes", "schema": TERMINAL}
    request = {"body": {"messages": ASK, "response_format": {"type": "json_schema",
               "json_schema": schema}, "min_tokens": 64, **body}}  # fmt: skip
    return {"kind": "request", "source": json.dumps(request)}


@pytest.mark.parametrize("stack", ["maskscope", "vllm-0.32.0"])
def test_a_requests_min_tokens_past_a_terminal_schema_flags_the_empty_mask(
    client: TestClient, stack: str
) -> None:
    body = {"grammar": _terminal_request(), "model": "qwen3.6", "stack": stack, "text": '"yes"'}
    answer = client.post("/api/replay", json=body)
    assert answer.status_code == 200, answer.text
    replay = answer.json()
    assert replay["accepted"], replay
    end = replay["end"]
    assert end["min_tokens"] == 64
    # the first step where only a stop is allowed: the one after the document's last token
    assert [e["step"] for e in end["empty_masks"]] == [len(replay["tokens"])]
    assert end["empty_masks"][0]["flag"] == "empty mask: vLLM aborts this request"
    # the body's own field wins over the request's
    overridden = client.post("/api/replay", json={**body, "min_tokens": 0})
    assert overridden.status_code == 200, overridden.text
    assert "end" not in overridden.json()
