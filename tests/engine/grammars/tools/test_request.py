"""A ``tools`` source parsed into a ToolsRequest: each bad field refused with its JSON pointer,
its line and column (the source written with an indent, so lines mean something)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from app.engine.grammars.tools.base import ToolFormat
from app.engine.grammars.tools.request import ModelRef, parse_tools
from app.exceptions import GrammarError

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
SOURCE: dict[str, Any] = {
    "builder": "xgrammar",
    "format": "qwen_3",
    "tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
        {"type": "function", "function": {"name": "respond", "strict": False}},
    ],
    "tool_choice": "auto",
    "reasoning": "enabled",
}


def _formats(builder: str) -> list[ToolFormat]:
    """Two builders as the registry would list them: vLLM unavailable, xgrammar with qwen_3."""
    if builder == "vllm":
        raise GrammarError("the vllm builder is unavailable: not installed")
    return [
        ToolFormat("xgrammar", "qwen_3", True, "</think>", True),
        ToolFormat("xgrammar", "gone", True, None, False, "refused here"),
    ]


def _text(data: Any) -> str:
    return json.dumps(data, indent=2)


def _error(data: Any) -> GrammarError:
    source = data if isinstance(data, str) else _text(data)
    with pytest.raises(GrammarError) as caught:
        parse_tools(source, _formats)
    return caught.value


def _changed(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(SOURCE)
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_DELETE = object()


def test_a_valid_source_gives_the_request_with_defaults() -> None:
    parsed = parse_tools(_text(SOURCE), _formats)
    request = parsed.request
    assert (request.builder, request.format, request.reasoning) == ("xgrammar", "qwen_3", "enabled")
    assert [t["function"]["name"] for t in request.tools] == ["get_weather", "respond"]
    assert request.parallel_tool_calls is True and request.strict_level is None
    assert parsed.models == () and parsed.pydantic is None
    bare = parse_tools(_text({"builder": "xgrammar", "format": "qwen_3"}), _formats).request
    assert bare.tools == () and bare.tool_choice == "auto" and bare.reasoning == "auto"


@pytest.mark.parametrize(
    ("path", "value", "pointer", "words"),
    [
        (["builder"], "sglang", "/builder", "unknown builder 'sglang'"),
        (["builder"], "vllm", "/builder", "unavailable: not installed"),
        (["format"], "qwen3", "/format", "unknown format 'qwen3' for the xgrammar builder"),
        (["format"], "gone", "/format", "unavailable: refused here"),
        (["tools", 0, "function", "name"], _DELETE, "/tools/0/function", "function.name"),
        (["tools", 1, "function", "name"], "", "/tools/1/function/name", "non-empty"),
        (["tools", 1, "function", "name"], "get_weather", "/tools/1/function/name", "twice"),
        (["tools", 0, "function", "parameters", "properties", "city", "type"], "str",
         "/tools/0/function/parameters/properties/city/type", "not a valid JSON Schema"),
        (["tools", 0, "function", "parameters"], [1], "/tools/0/function/parameters",
         "a JSON Schema"),
        (["tools", 0, "function", "parameter"], {}, "/tools/0/function/parameter",
         "unknown field 'parameter'"),
        (["tools", 0, "type"], "web_search", "/tools/0/type", '"function"'),
        (["tools", 0, "function", "strict"], "yes", "/tools/0/function/strict", "a boolean"),
        (["tool_choice"], {"type": "function", "function": {"name": "nope"}},
         "/tool_choice/function/name", "'nope', which is no tool"),
        (["tool_choice"], "always", "/tool_choice", "tool_choice is one of"),
        (["reasoning"], True, "/reasoning", "reasoning is one of"),
        (["parallel_tool_calls"], 1, "/parallel_tool_calls", "true or false"),
        (["tool"], [], "/tool", "unknown field 'tool'"),
    ],
)  # fmt: skip
def test_each_bad_field_is_refused_with_its_pointer(
    path: list[Any], value: Any, pointer: str, words: str
) -> None:
    data = _changed(path, value)
    error = _error(data)
    assert error.pointer == pointer and words in error.message, (error.pointer, error.message)
    assert error.line is not None and error.column is not None


def test_the_line_is_the_bad_fields_line() -> None:
    data = _changed(["tools", 0, "function", "parameters", "properties", "city", "type"], "str")
    error = _error(data)
    lines = _text(data).splitlines()
    assert error.line is not None and '"type": "str"' in lines[error.line - 1]


def test_required_needs_a_tool_and_not_json_is_placed() -> None:
    error = _error({"builder": "xgrammar", "format": "qwen_3", "tool_choice": "required"})
    assert error.pointer == "/tool_choice" and "needs a tool" in error.message
    error = _error('{"builder": "xgrammar",\n "format": }')
    assert error.message.startswith("invalid JSON") and error.line == 2
    assert _error("[]").message == "a tools source is a JSON object, not an array"
    assert _error({"format": "qwen_3"}).message.startswith("missing field 'builder'")


def test_a_model_reference_needs_the_pydantic_field_and_is_listed() -> None:
    data = _changed(["tools", 0, "function", "parameters"], {"$model": "Weather"})
    error = _error(data)
    assert error.pointer == "/tools/0/function/parameters/$model"
    assert "no 'pydantic' field" in error.message
    data["pydantic"] = "class Weather(BaseModel):\n    city: str\n"
    parsed = parse_tools(_text(data), _formats)
    assert parsed.models == (ModelRef(0, "Weather"),) and parsed.pydantic == data["pydantic"]
    text = parsed.resolved({"Weather": WEATHER})
    resolved = json.loads(text)
    assert resolved["tools"][0]["function"]["parameters"] == WEATHER
    # written where the reference was: every other line is the source's own
    before, after = _text(data).splitlines(), text.splitlines()
    assert len(before) == len(after)
    changed = [a != b for a, b in zip(before, after, strict=True)]
    assert changed.count(True) == 3  # the three lines of the reference
    again = parse_tools(text, _formats)
    assert again.models == () and again.request.tools[0]["function"]["parameters"] == WEATHER
    error = _error(_changed(["tools", 0, "function", "parameters"], {"$model": "W", "x": 1}))
    assert error.pointer == "/tools/0/function/parameters/x"
