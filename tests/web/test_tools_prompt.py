"""A tools source's prompt over HTTP (issue #42): the compile answer and the page's compile panel
give the prompt's token count with and without each option that changes it. A pasted template
that renders each tool's ``strict`` flag (vLLM #52741, ``tests/fixtures/templates/strict.jinja``)
changes the count; the numbers are checked against renders made here with the tokenizer."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.engine import Engine

STRICT = (
    Path(__file__).resolve().parent.parent / "fixtures" / "templates" / "strict.jinja"
).read_text()
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
HX = {"HX-Request": "true"}


def _source(**extra: Any) -> str:
    source = {"builder": "xgrammar", "format": "qwen_3", "tools": [WEATHER],
              "tool_choice": "required", "reasoning": "disabled", **extra}  # fmt: skip
    return json.dumps(source)


def _count(engine: Engine, messages: list[dict[str, str]], tools: Any, **variables: Any) -> int:
    """The template rendered and tokenized here, with the tokenizer itself."""
    text = engine.model.tokens.tokenizer.apply_chat_template(
        messages, tools=tools, chat_template=STRICT, tokenize=False,
        add_generation_prompt=True, **variables,
    )  # fmt: skip
    return len(engine.model.tokens.encode(text))


def _strict(value: bool) -> list[dict[str, Any]]:
    tool = copy.deepcopy(WEATHER)
    tool["function"]["strict"] = value
    return [tool]


def _expected(engine: Engine, messages: list[dict[str, str]]) -> dict[str, tuple[int, int]]:
    return {
        "strict": (
            _count(engine, messages, _strict(True)),
            _count(engine, messages, _strict(False)),
        ),
        "tool_choice": (_count(engine, messages, [WEATHER]), _count(engine, messages, None)),
        "reasoning": (
            _count(engine, messages, [WEATHER], enable_thinking=True),
            _count(engine, messages, [WEATHER], enable_thinking=False),
        ),
    }


def test_a_template_that_renders_strict_changes_the_prompts_token_count(
    client: TestClient, engine: Engine
) -> None:
    grammar = {"kind": "tools", "source": _source(chat_template=STRICT)}
    response = client.post("/api/compile", json=grammar)
    assert response.status_code == 200, response.text
    prompt = response.json()["prompt"]
    assert prompt["template"]["origin"] == "pasted" and "error" not in prompt
    messages = [{"role": "user", "content": "Use the tools."}]  # the default conversation
    assert prompt["tokens"] == _count(engine, messages, [WEATHER], enable_thinking=False)
    assert "get_weather" in prompt["text"] and "(strict:" not in prompt["text"]
    rows = {row["option"]: row for row in prompt["options"]}
    expected = _expected(engine, messages)
    assert {name: (row["with"], row["without"]) for name, row in rows.items()} == expected
    assert rows["strict"]["with"] > rows["strict"]["without"] and rows["strict"]["changes"]
    assert rows["tool_choice"]["changes"]  # `none`: the tools are not rendered
    assert not rows["reasoning"]["changes"]  # the template reads no enable_thinking


def test_the_compile_panel_counts_the_prompt_of_the_forms_messages(
    client: TestClient, engine: Engine
) -> None:
    form = {"kind": "tools", "source": _source(chat_template=STRICT), "preset": "maskscope",
            "prompt_mode": "chat", "system": "You route requests.",
            "user": "What is the weather in Paris?"}  # fmt: skip
    html = client.post("/ui/compile", data=form, headers=HX).text
    messages = [{"role": "system", "content": "You route requests."},
                {"role": "user", "content": "What is the weather in Paris?"}]  # fmt: skip
    shown = re.search(r'id="tools-prompt" data-tokens="(\d+)"', html)
    assert shown is not None, html
    assert int(shown.group(1)) == _count(engine, messages, [WEATHER], enable_thinking=False)
    rows = re.findall(r'data-option="(\w+)" data-with="(\d+)" data-without="(\d+)"', html)
    expected = _expected(engine, messages)
    assert {name: (int(a), int(b)) for name, a, b in rows} == expected
    assert re.search(r'<tr class="changes" data-option="strict"', html)
    assert re.search(r'<tr class="same" data-option="reasoning"', html)


def test_a_template_that_cannot_render_is_named_and_the_compile_stands(
    client: TestClient,
) -> None:
    broken = _source(chat_template="{{ raise_exception('no tools here') }}")
    answer = client.post("/api/compile", json={"kind": "tools", "source": broken}).json()
    assert answer["structural_tag"] is not None  # compiled all the same
    error = answer["prompt"]["error"]
    assert error["pointer"] == "/chat_template" and "no tools here" in error["message"]
    assert "options" not in answer["prompt"]
    plain = client.post("/api/compile", json={"kind": "regex", "source": "[0-9]+"}).json()
    assert "prompt" not in plain
