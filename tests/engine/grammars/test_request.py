"""A ``request`` source's shape, and the runner's answer named as a grammar kind (the stack's
own derivation is tested against both real vLLM releases in tests/web/test_request_source.py)."""

from __future__ import annotations

import json

import pytest

from app.engine.grammars.request import derived_request, parse_request
from app.exceptions import GrammarError
from app.vocabulary import GrammarKind

BODY = {"messages": [{"role": "user", "content": "hi"}]}


def test_a_source_keeps_the_body_the_flags_and_the_template() -> None:
    source = {"body": BODY, "serve": {"tool_call_parser": "hermes", "strict_tool_calling": False},
              "chat_template": "{{ messages }}"}  # fmt: skip
    parsed = parse_request(json.dumps(source))
    assert parsed.body == BODY and parsed.chat_template == "{{ messages }}"
    assert parsed.serve == {"tool_call_parser": "hermes", "strict_tool_calling": False}


@pytest.mark.parametrize(
    ("source", "pointer", "says"),
    [
        ({"serve": {}}, "", "missing field 'body'"),
        ({"body": BODY, "prompt": "x"}, "/prompt", "unknown field 'prompt'"),
        ({"body": []}, "/body", "body is a JSON object"),
        ({"body": BODY, "serve": {"tool_call_parser": 1}}, "/serve/tool_call_parser", "string"),
        (
            {"body": BODY, "serve": {"strict_tool_calling": "yes"}},
            "/serve/strict_tool_calling",
            "boolean",
        ),  # fmt: skip
        ({"body": BODY, "chat_template": 3}, "/chat_template", "chat_template is a string"),
    ],
)
def test_a_bad_source_is_refused_at_its_pointer_and_line(
    source: dict[str, object], pointer: str, says: str
) -> None:
    text = json.dumps(source, indent=2)
    with pytest.raises(GrammarError, match=says) as refused:
        parse_request(text)
    assert (refused.value.pointer or "") == pointer
    key = f'"{pointer.rsplit("/", 1)[-1]}":'
    line = next(i for i, row in enumerate(text.splitlines(), 1) if key in row) if pointer else 1
    assert refused.value.line == line


def _answer(constraint: object, as_grammar: object = None) -> dict[str, object]:
    return {
        "prompt": "p",
        "prompt_tokens": 1,
        "constraint": constraint,
        "as_grammar": as_grammar,
        "reasoning_end": "</think>",
        "min_tokens": 2,
        "stop_token_ids": [5],
        "stop": ["x"],
    }


def test_each_constraint_is_the_kind_maskscope_compiles() -> None:
    tag = {"type": "structural_tag", "format": {"type": "const_string", "value": "a"}}
    derived = derived_request(_answer({"structural_tag": json.dumps(tag)}), "vllm-0.34.0", {})
    assert derived.kind is GrammarKind.STRUCTURAL_TAG and json.loads(derived.source) == tag
    assert derived.to_dict()["stop_token_ids"] == [5] and derived.to_dict()["min_tokens"] == 2
    schema = derived_request(_answer({"json": {"type": "integer"}}), "s", {})
    assert schema.kind is GrammarKind.JSON_SCHEMA and json.loads(schema.source) == {
        "type": "integer"
    }
    assert derived_request(_answer({"regex": "a+"}), "s", {}).kind is GrammarKind.REGEX
    choice = derived_request(_answer({"choice": ["a"]}, {"ebnf": 'root ::= "a"'}), "s", {})
    assert choice.kind is GrammarKind.EBNF and choice.source == 'root ::= "a"'


@pytest.mark.parametrize(
    ("constraint", "as_grammar", "says"),
    [
        (None, None, "vLLM constrains nothing"),
        ({"json_object": True}, None, "a json_object constraint, which Maskscope does not"),
        ({"grammar": "start: x"}, {"lark": "start: x"}, "a Lark grammar"),
    ],
)
def test_what_maskscope_does_not_compile_is_said(
    constraint: object, as_grammar: object, says: str
) -> None:
    with pytest.raises(GrammarError, match=says) as refused:
        derived_request(_answer(constraint, as_grammar), "s", {})
    assert refused.value.pointer == "/body"
