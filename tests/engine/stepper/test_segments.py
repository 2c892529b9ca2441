"""Segments of a structural tag's output, against positions computed here from the text itself
(``str.find`` of the markers), never by the walker: xgrammar's own tags for several families and
argument styles, a real session on the default model, and a replay."""

from __future__ import annotations

import json
from typing import Any

import pytest
import xgrammar as xgr

from app.engine import Engine, GrammarKind, GrammarSpec
from app.engine.grammars.reasoning import ReasoningMode
from app.engine.stepper.segments import locate

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": WEATHER}},
]


def xgrammar_tag(model: str, reasoning: str = "disabled", choice: str = "auto") -> dict[str, Any]:
    tag = xgr.get_model_structural_tag(model, tools=TOOLS, tool_choice=choice, reasoning=reasoning)
    out: dict[str, Any] = json.loads(tag.model_dump_json())
    return out


def kinds(tag: dict[str, Any], text: str) -> list[tuple[str, str | None, str | None, str]]:
    """The walker's (kind, tool, parameter, path) at every offset of ``text``."""
    out = []
    for offset in range(len(text) + 1):
        where = locate(tag, text[:offset])
        assert where.segment is not None, (offset, text[:offset])
        seg = where.segment
        out.append((seg.kind, seg.tool, seg.parameter, where.path))
    return out


def test_json_arguments_reasoning_and_paths() -> None:
    tag = xgrammar_tag("qwen_3", reasoning="enabled")
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    text = "Think a bit.</think>\n\nSure. " + call + " Done."
    think_end = text.find("</think>") + len("</think>")
    call_at = text.find("<tool_call>")
    trigger_end = call_at + len("<tool_call>")
    name = text.find("get_weather")
    args = text.find('{"city"')
    key_end = text.find('"city"') + len('"city"')
    args_end = text.find("}", args) + 1
    tag_end = text.find("</tool_call>") + len("</tool_call>")
    for offset, (kind, tool, parameter, path) in enumerate(kinds(tag, text)):
        assert parameter is None
        if offset < think_end:
            expected: tuple[str, str | None, str] = ("reasoning", None, "")
        elif offset < trigger_end or offset >= tag_end:
            expected = ("text", None, "")
        elif name <= offset < name + len("get_weather"):
            # both tools' names start "get_": the tool is known once they differ
            expected = ("tool_name", "get_weather" if offset >= name + 5 else None, "")
        elif offset < args:
            expected = ("tag_begin", "get_weather" if offset > name else None, "")
        elif offset < args_end:
            expected = ("arguments", "get_weather", "$.city" if offset >= key_end else "$")
        else:
            expected = ("tag_end", "get_weather", "")
        assert (kind, tool, path) == expected, (offset, text[:offset])


def test_qwen_xml_parameters() -> None:
    tag = xgrammar_tag("qwen_3_5")
    text = (
        "Ok. <tool_call>\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    trigger_end = text.find("<function=") + len("<function=")
    name_end = trigger_end + len("get_time")
    args = name_end + len(">\n")
    opened = text.find("<parameter=city>") + len("<parameter=city>")
    closed = text.find("</parameter>") + len("</parameter>")
    end_starts = text.find("\n</function>") + len("\n</")
    done = len(text)
    for offset, (kind, tool, parameter, path) in enumerate(kinds(tag, text)):
        assert path == ""
        if offset < trigger_end or offset >= done:
            expected: tuple[str, str | None, str | None] = ("text", None, None)
        elif offset < name_end:
            expected = ("tool_name", "get_time" if offset > trigger_end + 4 else None, None)
        elif offset < args:
            expected = ("tag_begin", "get_time", None)
        elif opened <= offset < closed:
            expected = ("arguments", "get_time", "city")
        elif offset < end_starts:
            expected = ("arguments", "get_time", None)
        else:
            expected = ("tag_end", "get_time", None)
        assert (kind, tool, parameter) == expected, (offset, text[:offset])


@pytest.mark.parametrize(
    ("model", "prefix", "call", "value"),
    [
        ("glm_4_7", "", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>"
         "</tool_call>", "Rome"),
        ("minimax", "\n</think>\n\n\n\n", '<minimax:tool_call>\n<invoke name="get_weather">\n'
         '<parameter name="city">Rome</parameter>\n</invoke>\n</minimax:tool_call>', "Rome"),
        ("deepseek_v3_2", "", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
         '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n'
         "</｜DSML｜invoke>\n</｜DSML｜function_calls>", "Rome"),
    ],
)  # fmt: skip
def test_xml_styles_name_the_parameter(model: str, prefix: str, call: str, value: str) -> None:
    """``prefix``: what the tag forces first (minimax's closed thinking)."""
    tag = xgrammar_tag(model)
    text = prefix + "Let me look. " + call
    walked = kinds(tag, text)
    inside = text.find(value)
    for offset in range(inside, inside + len(value) + 1):
        assert walked[offset][:3] == ("arguments", "get_weather", "city"), offset
    name = text.find("get_weather")
    assert walked[name + 5][0] == "tool_name"
    assert walked[len(text)][0] == "text" and walked[len(prefix) + 5][0] == "text"


def test_a_grammar_that_is_not_a_tag_has_no_segment(engine: Engine) -> None:
    session = engine.new_session(GrammarSpec(GrammarKind.REGEX, "[a-z]{3}"), raw_prompt="Say abc: ")
    assert session.step().segment is None


def test_segments_and_paths_per_step_on_a_real_session(engine: Engine) -> None:
    tag = xgrammar_tag("qwen_3", choice="required")
    spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, json.dumps(tag))
    prompt = (
        "<|im_start|>user\nWhat is the weather in Paris? Call get_weather.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    session = engine.new_session(spec, raw_prompt=prompt, max_tokens=60)
    session.run(60)
    text = session.text
    assert text.startswith('<tool_call>\n{"name": "get_')
    name = text.find("get_")
    tool = text[name : text.find('"', name)]
    args = text.find('"arguments": ') + len('"arguments": ')
    tag_end_at = text.find("}\n</tool_call>", args)
    offset = 0
    for step in session.steps:
        segment = step.segment
        assert segment is not None
        if offset < len("<tool_call>"):
            assert segment.kind == "tag_begin"  # required: the begin is forced from token 0
        elif name <= offset < name + len(tool):
            assert segment.kind == "tool_name"
        elif offset < args:
            assert segment.kind == "tag_begin"
        elif tag_end_at < 0 or offset < tag_end_at:
            assert segment.kind == "arguments" and step.path.startswith("$")
            before = text[args:offset]
            if '"city":' in before:
                assert step.path == "$.city"
        offset += len(step.token_bytes.decode("utf-8", errors="replace"))
    assert session.steps[-1].segment is not None


def test_replay_tokens_carry_segments(engine: Engine) -> None:
    tag = xgrammar_tag("qwen_3", reasoning="enabled")
    spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, json.dumps(tag))
    call = '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>'
    text = "Hmm.</think>\n\n" + call
    for mode in (ReasoningMode.NONE, ReasoningMode.MASK_AFTER_END):
        result = engine.replay(spec, text=text, reasoning=mode)
        assert result.accepted and result.complete
        offset = 0
        think_end = text.find("</think>") + len("</think>")
        city = text.find('"Oslo"')
        for token in result.tokens:
            assert token.segment is not None
            if offset < think_end:
                assert token.segment.kind == "reasoning"
            if offset == city:
                assert token.segment.kind == "arguments" and token.path == "$.city"
            offset += len(token.text)
