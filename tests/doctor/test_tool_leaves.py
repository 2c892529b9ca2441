"""Each tool's call and arguments read from a built tag's structure, whichever shape the release
builds: one leaf for the whole arguments, or one part per parameter (GLM-4.7 under vLLM 0.34.0
keeps every non-strict value as raw text, so its tag has no ``json_schema`` leaf at all)."""

from __future__ import annotations

from typing import Any

from app.doctor.tool_leaves import tool_leaves

ANY_TEXT = {"type": "any_text", "excludes": ["</arg_value>"]}


def tool(name: str, *parameters: str) -> dict[str, Any]:
    properties = {p: {"type": "string"} for p in parameters}
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties, "required": list(parameters)}}}  # fmt: skip


def glm(name: str, values: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A GLM-style call: each parameter's key string, then its value, any order, any times."""
    pairs = [
        {"type": "sequence", "elements": [
            {"type": "const_string", "value": f"<arg_key>{key}</arg_key><arg_value>"},
            value,
            {"type": "const_string", "value": "</arg_value>"},
        ]}
        for key, value in values.items()
    ]  # fmt: skip
    content = {"type": "star", "content": {"type": "or", "elements": pairs}}
    return {"type": "tag", "begin": f"<tool_call>{name}", "content": content,
            "end": "</tool_call>"}  # fmt: skip


def structural(*tags: dict[str, Any]) -> dict[str, Any]:
    return {"type": "structural_tag", "format": {"type": "tags_with_separator",
            "tags": list(tags), "separator": "", "at_least_one": True}}  # fmt: skip


def test_a_call_whose_every_value_is_raw_text_is_still_a_call_of_its_tool() -> None:
    """The wrong finding: 0.34.0's GLM-4.7 tag has no ``json_schema`` leaf, and the Doctor said
    "the tag built has no call of search"."""
    tag = structural(glm("search", {"query": ANY_TEXT, "paths": ANY_TEXT}))
    (search,) = tool_leaves(tag, [tool("search", "query", "paths")])
    assert search.called and search.leaf is None and search.free is None
    assert [(p.name, p.value["type"], p.loose) for p in search.parameters] == [
        ("query", "any_text", True), ("paths", "any_text", True),
    ]  # fmt: skip


def test_a_parameter_s_json_leaf_is_that_parameter_s_not_the_whole_arguments() -> None:
    """0.32.0's GLM-4.7 tag compiles the array value as JSON: a leaf of ``paths``, not the
    schema of every argument."""
    array = {"type": "json_schema", "json_schema": {"type": "array"}, "style": "json"}
    tag = structural(glm("search", {"query": ANY_TEXT, "paths": array}))
    (search,) = tool_leaves(tag, [tool("search", "query", "paths")])
    assert search.leaf is None
    assert {p.name: p.value for p in search.parameters} == {"query": ANY_TEXT, "paths": array}


def test_a_parameter_named_like_another_tool_stays_its_own_tool_s() -> None:
    tag = structural(glm("search", {"query": ANY_TEXT}), glm("query", {"text": ANY_TEXT}))
    search, query = tool_leaves(tag, [tool("search", "query"), tool("query", "text")])
    assert [p.name for p in search.parameters] == ["query"]
    assert [p.name for p in query.parameters] == ["text"]


def test_a_word_every_key_writes_is_the_format_s_not_a_parameter_s() -> None:
    """Kimi K3's keys write ``type="..."`` beside the name: a parameter named ``type`` is only
    the one whose key says ``key="type"``."""

    def argument(key: str) -> dict[str, Any]:
        begin = f'<|open|>argument key="{key}" type="string"<|sep|>'
        return {"type": "tag", "begin": begin, "content": ANY_TEXT, "end": "<|close|>argument"}

    call = {"type": "tag", "begin": '<|open|>call tool="lookup" index="', "content": {
        "type": "plus", "content": {"type": "or", "elements": [argument("q"), argument("type")]}},
        "end": "<|close|>call"}  # fmt: skip
    (lookup,) = tool_leaves(structural(call), [tool("lookup", "q", "type")])
    assert [p.name for p in lookup.parameters] == ["q", "type"]


def test_whole_arguments_stay_one_leaf_and_a_tool_never_written_is_not_called() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    hermes = {
        "type": "tag",
        "begin": '<tool_call>{"name": "search", "arguments": ',
        "content": {"type": "json_schema", "json_schema": schema},
        "end": "}</tool_call>",
    }
    search, other = tool_leaves(structural(hermes), [tool("search", "q"), tool("other", "q")])
    assert search.called and search.leaf == hermes["content"] and not search.parameters
    assert not other.called and other.leaf is None
