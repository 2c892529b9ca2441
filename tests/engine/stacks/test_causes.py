"""Refusal causes (issue #40, item 5): every refusal of a ``tools`` source has one; a tag's
opening is named as the stack's cause names it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.engine import Engine
from app.engine.factories.tokenizer_only import open_tokenizer
from app.engine.grammars.spec import CompileOptions, GrammarSpec
from app.engine.stacks.causes import tag_starts
from app.engine.stepper.replay import replay
from app.settings import Settings
from app.vocabulary import GrammarKind

SEARCH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    ("fmt", "starts"),
    [
        ({"type": "tag", "begin": "<tool_call>", "content": {}, "end": "</tool_call>"},
         ["<tool_call>"]),
        ({"type": "sequence", "elements": [{"type": "const_string", "value": "<a>"},
                                           {"type": "any_text"}]}, ["<a>"]),
        ({"type": "tags_with_separator", "separator": "\n", "tags": [
            {"type": "tag", "begin": "<x>", "end": "</x>"},
            {"type": "tag", "begin": "<y>", "end": "</y>"}]}, ["<x>", "<y>"]),
        ({"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": []}, ["<tool_call>"]),
        ({"type": "any_text"}, []),
    ],
)  # fmt: skip
def test_tag_starts(fmt: dict[str, Any], starts: list[str]) -> None:
    assert tag_starts({"type": "structural_tag", "format": fmt}) == starts


@pytest.fixture(scope="module")
def qwen() -> Iterator[Engine[Any]]:
    engine = open_tokenizer(Settings(), "qwen3.6")
    assert engine is not None
    yield engine
    engine.close()


def test_every_refusal_of_a_tools_source_has_a_cause(qwen: Engine[Any]) -> None:
    source = json.dumps(
        {"builder": "xgrammar", "format": "qwen_3", "tools": [SEARCH], "tool_choice": "required"}
    )
    grammar = qwen.compile(GrammarSpec(GrammarKind.TOOLS, source, CompileOptions()))
    result = replay(grammar, qwen.model.tokens, text="Sure, I will search.")
    assert not result.accepted and result.refusal is not None
    assert result.refusal.cause and "<tool_call>" in result.refusal.cause
