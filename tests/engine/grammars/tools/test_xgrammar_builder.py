"""The xgrammar builder: properties of the tag it builds, checked against the tools given (each
tool's schema where its call is, ``json_schema: true`` for a tool that is not strict, the tool
choice and parallel calls as the tag's flags, the reasoning's end), and the tag compiled and
matching a call written by hand."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from typing import Any

import pytest
import xgrammar as xgr

from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.unconstrained import unconstrained
from app.engine.grammars.tools.xgrammar_builder import XgrammarBuilder
from app.exceptions import GrammarError

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Oslo", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
CLOCK = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
TOOLS = (
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": CLOCK, "strict": True}},
    {"type": "function", "function": {"name": "loose", "parameters": CLOCK, "strict": False}},
    {"type": "function", "function": {"name": "bare"}},
)
BUILDER = XgrammarBuilder()
# Printable ASCII and a newline, one character a token: a vocabulary every marker can be spelled in.
VOCAB = xgr.TokenizerInfo([chr(i) for i in range(32, 127)] + ["\n"])


def request(**fields: Any) -> ToolsRequest:
    return ToolsRequest(**{"builder": "xgrammar", "format": "qwen_3", "tools": TOOLS, **fields})


def nodes(node: Any, kind: str) -> Iterator[dict[str, Any]]:
    """Every format of type ``kind`` in the tag."""
    if isinstance(node, dict):
        if node.get("type") == kind:
            yield node
        for value in node.values():
            yield from nodes(value, kind)
    elif isinstance(node, list):
        for value in node:
            yield from nodes(value, kind)


def schema_by_tool(tag: dict[str, Any]) -> dict[str, Any]:
    """The arguments' schema of each call tag, by the tool name its begin writes."""
    found = {}
    for tag_node in nodes(tag, "tag"):
        content = tag_node["content"]
        if content.get("type") == "json_schema":
            name = json.loads(tag_node["begin"].split("\n", 1)[1] + '""}')["name"]
            found[name] = content["json_schema"]
    return found


def accepts(tag: dict[str, Any], text: str) -> bool:
    compiled = xgr.GrammarCompiler(VOCAB).compile_structural_tag(json.dumps(tag))
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return bool(matcher.accept_string(text)) and matcher.is_terminated()


def test_each_tool_has_its_schema_and_a_tool_not_strict_any_json() -> None:
    build = BUILDER.build(request(tool_choice="auto", reasoning="disabled"), "unused")
    assert build.tag is not None and build.reason is None
    schemas = schema_by_tool(build.tag)
    assert schemas == {"get_weather": WEATHER, "get_time": CLOCK, "loose": True, "bare": True}
    names = ["get_weather", "get_time", "loose", "bare"]
    free = unconstrained(build.tag, reason=None, tool_names=names, reasoning_end=None)
    assert "arguments of loose: any JSON" in free and "arguments of bare: any JSON" in free
    assert not any("get_weather" in line or "get_time" in line for line in free)
    assert any(line.startswith("free text before, between and after calls") for line in free)
    assert build.builder_versions == {"xgrammar": importlib.metadata.version("xgrammar")}


def test_tool_choice_and_parallel_calls_become_the_tags_flags() -> None:
    required = BUILDER.build(request(tool_choice="required", reasoning="disabled"), "")
    (triggered,) = nodes(required.tag, "triggered_tags")
    assert triggered["at_least_one"] is True and triggered["stop_after_first"] is False
    once = BUILDER.build(request(tool_choice="auto", parallel_tool_calls=False,
                                 reasoning="disabled"), "")  # fmt: skip
    (triggered,) = nodes(once.tag, "triggered_tags")
    assert triggered["at_least_one"] is False and triggered["stop_after_first"] is True
    named = {"type": "function", "function": {"name": "get_time"}}
    forced = BUILDER.build(request(tool_choice=named, reasoning="disabled"), "")
    assert forced.tag is not None and schema_by_tool(forced.tag) == {"get_time": CLOCK}
    assert not list(nodes(forced.tag, "triggered_tags"))
    none = BUILDER.build(request(tool_choice="none", reasoning="disabled"), "")
    assert none.tag is not None and none.tag["format"]["type"] == "any_text"


def test_the_reasoning_end_is_read_from_the_tag() -> None:
    enabled = BUILDER.build(request(reasoning="enabled"), "")
    assert enabled.reasoning_end == "</think>"
    ends = [t["end"] for t in nodes(enabled.tag, "tag") if t["content"]["type"] == "any_text"]
    assert ends == ["</think>"]
    assert BUILDER.build(request(reasoning="disabled"), "").reasoning_end is None
    llama = BUILDER.build(request(format="llama", reasoning="enabled"), "")
    assert llama.reasoning_end is None  # llama's format has no reasoning block
    gemma = BUILDER.build(request(format="gemma_4", reasoning="auto"), "")
    assert gemma.reasoning_end == "<channel|>"


def test_the_tag_compiles_and_takes_a_call_written_by_hand() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    build = BUILDER.build(request(tool_choice=named, reasoning="enabled"), "")
    assert build.tag is not None
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert accepts(build.tag, "Rain, so I check.</think>\n\n" + call)
    assert not accepts(build.tag, "Rain, so I check.</think>\n\n" + call.replace("Oslo", "Paris"))
    assert not accepts(build.tag, call)  # the reasoning must end first


def test_the_formats_come_from_xgrammar_and_the_vllm_fields_are_noted() -> None:
    formats = {f.name: f for f in BUILDER.formats()}
    assert {"qwen_3", "llama", "deepseek_v4", "harmony"} <= set(formats)
    assert all(f.available and f.builds_tag and f.builder == "xgrammar" for f in formats.values())
    assert formats["qwen_3"].reasoning_end == "</think>" and formats["llama"].reasoning_end is None
    build = BUILDER.build(request(strict_level="all", reasoning="disabled"), "")
    assert build.notes == ("strict_level is vLLM's: xgrammar's get_model_structural_tag does "
                           "not take it",)  # fmt: skip


def test_a_request_xgrammar_refuses_is_a_grammar_error() -> None:
    with pytest.raises(GrammarError, match="get_model_structural_tag refuses it"):
        BUILDER.build(request(format="no_such_format"), "")
