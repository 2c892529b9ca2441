"""What a tag leaves unconstrained, in words, read from the tag: a table of small tags."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.grammars.tools.unconstrained import unconstrained


def tag(fmt: dict[str, Any]) -> dict[str, Any]:
    return {"type": "structural_tag", "format": fmt}


def call(name: str, schema: Any, style: str = "json") -> dict[str, Any]:
    return {"type": "tag", "begin": f'<call name="{name}">', "end": "</call>",
            "content": {"type": "json_schema", "json_schema": schema, "style": style}}  # fmt: skip


def triggered(*tags: dict[str, Any], first: bool = False, once: bool = False) -> dict[str, Any]:
    return {"type": "triggered_tags", "triggers": ["<call"], "tags": list(tags),
            "at_least_one": first, "stop_after_first": once, "excludes": ["<think>"]}  # fmt: skip


NAMES = ["get", "get_weather"]
OBJECT = {"type": "object"}


@pytest.mark.parametrize(
    ("fmt", "said"),
    [
        (triggered(call("get_weather", True)),
         ["free text before, between and after calls (never '<think>') (a call begins at "
          "'<call')", "arguments of get_weather: any JSON"]),
        (triggered(call("get", {}), once=True),
         ["free text before the call (never '<think>') (a call begins at '<call'; the output "
          "ends after it)", "arguments of get: any JSON"]),
        (triggered(call("get", OBJECT), first=True),
         ["free text between and after calls (never '<think>') (the output begins with a call)"]),
        (triggered(call("get", OBJECT), first=True, once=True),
         ["nothing: every part of the output is constrained"]),
        ({"type": "sequence", "elements": [
            {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"},
            call("get_weather", True, "qwen_xml")]},
         ["reasoning: any text until '</think>'",
          "arguments of get_weather: any arguments (qwen_xml style)"]),
        ({"type": "tag", "begin": "<|final|>", "content": {"type": "any_text"},
          "end": ["<|end|>", "<|return|>"]},
         ["text after '<|final|>' until '<|end|>' or '<|return|>': any text"]),
        ({"type": "any_text", "excludes": ["<think>", "</think>"]},
         ["free text: any text (never '<think>', '</think>')"]),
    ],
)  # fmt: skip
def test_what_each_tag_leaves_free(fmt: dict[str, Any], said: list[str]) -> None:
    assert list(unconstrained(tag(fmt), reason=None, tool_names=NAMES,
                              reasoning_end="</think>")) == said  # fmt: skip


def test_no_tag_says_so_with_the_builders_reason() -> None:
    (said,) = unconstrained(None, reason="tool_choice auto and no strict tool", tool_names=[],
                            reasoning_end=None)  # fmt: skip
    assert said.startswith("no tag: the call is not constrained (tool_choice auto and no strict")
    assert said.endswith("every token is allowed")
