"""The replay's setting to try (issue 45, C1/C2): one setting, derived from what the engine and the
stack report (the refused token against vLLM's reasoning parsers' end markers or xgrammar's
format's, the tools source's fields, the tag built or not), never from a message's text; and
the cause in words for every replay."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from app.engine.grammars.request import SERVE_FLAGS
from app.engine.grammars.tools.base import ToolsBuild, ToolsRequest
from app.engine.grammars.tools.request import parse_tools
from app.engine.mask_summary import MaskSummary
from app.engine.records import Refusal, ReplayResult
from app.web.services.replay_cause import cause_words
from app.web.services.replay_setting import Setting, setting_to_try
from app.web.services.serve_flags import SERVE_FIELDS

TOOL = {"type": "function", "function": {"name": "fetch_user_features", "parameters": {}}}
OTHER = {"type": "function", "function": {"name": "respond", "parameters": {}}}
# vLLM's reasoning parsers as its registry answers (three end at </think>)
PARSERS = [
    {"name": "deepseek_r1", "reasoning_end": "</think>", "reason": None},
    {"name": "glm45", "reasoning_end": "</think>", "reason": None},
    {"name": "gpt_oss", "reasoning_end": None, "reason": "names no end marker"},
    {"name": "qwen3", "reasoning_end": "</think>", "reason": None},
]
TAG = {"type": "structural_tag", "format": {"type": "any_text"}}


def vllm(**fields: Any) -> ToolsRequest:
    base: dict[str, Any] = {"builder": "vllm", "format": "hermes", "tools": (TOOL,)}
    return ToolsRequest(**(base | fields))


def built(tag: dict[str, Any] | None = TAG, end: str | None = None, reason: str = "") -> ToolsBuild:
    return ToolsBuild(tag, reason or None, end, {"vllm": "0.32.0"})


NO_TAG = built(None, reason="tool_choice is auto, no tool says strict: true")


@pytest.mark.parametrize(
    ("kwargs", "field", "value", "text"),
    [
        # the c1 screen: vLLM's builder, no reasoning parser, </think> refused at #0
        (
            {"refused": ["</think>"], "tools": vllm(), "build": built(), "model": "qwen3.6"},
            "reasoning_parser", "qwen3", "set reasoning_parser to qwen3",
        ),
        # the log line's first id is reasoning ("\n"): the end marker comes after it
        (
            {"refused": ["\n", "</think>", "\n\n"], "tools": vllm(), "build": built(),
             "model": "qwen3.6"},
            "reasoning_parser", "qwen3", "set reasoning_parser to qwen3",
        ),
        # another model: the first by name of those that end there
        (
            {"refused": ["</think>"], "tools": vllm(), "build": built(), "model": "local"},
            "reasoning_parser", "deepseek_r1", "set reasoning_parser to deepseek_r1",
        ),
        # the parser is set, the stack masks from token 0: vLLM's default masks after its end
        (
            {"refused": ["</think>"], "tools": vllm(reasoning_parser="qwen3"),
             "build": built(end="</think>"), "reasoning": "none"},
            "stack_reasoning", "mask_after_end", "set stack reasoning to mask_after_end",
        ),
        # xgrammar's builder: its own reasoning mode, never vLLM's flag
        (
            {"refused": ["</think>"], "format_end": "</think>",
             "tools": ToolsRequest("xgrammar", "qwen_3", (TOOL,), reasoning="disabled"),
             "build": built()},
            "reasoning", "enabled", "set reasoning to enabled",
        ),
        # refused whitespace that a preset takes
        (
            {"refused": [" "], "tools": None, "build": None, "presets": ["vllm", "xgrammar"]},
            "preset", "vllm", "set preset to vLLM default",
        ),
        # a log line vLLM rejected, accepted here because this builder built no tag
        (
            {"refused": [], "tools": vllm(tool_choice="auto"), "build": NO_TAG,
             "log_rejected": True},
            "strict", True, "turn strict on for tool fetch_user_features",
        ),
        (
            {"refused": [], "tools": vllm(tools=(TOOL, OTHER)), "build": NO_TAG,
             "log_rejected": True},
            "strict_level", "function", "set strict_level to function",
        ),
        (
            {"refused": [], "tools": vllm(strict_tool_calling=False), "build": NO_TAG,
             "log_rejected": True},
            "strict_tool_calling", True, "turn strict tool calling on",
        ),
    ],
)  # fmt: skip
def test_one_setting_is_derived_from_what_was_reported(
    kwargs: dict[str, Any], field: str, value: object, text: str
) -> None:
    found = setting_to_try(parsers=PARSERS, **kwargs)
    assert found is not None
    assert (found.field, found.value, found.text) == (field, value, text)
    assert found.why


def test_the_strict_setting_names_its_tool() -> None:
    found = setting_to_try(refused=[], tools=vllm(), build=NO_TAG, log_rejected=True)
    assert found is not None
    assert found == Setting(
        "strict", True, "turn strict on for tool fetch_user_features", found.why,
        "fetch_user_features",
    )  # fmt: skip


@pytest.mark.parametrize(
    "kwargs",
    [
        # a token no reasoning parser ends at
        {"refused": ["<tool_call>"], "tools": vllm(), "build": built()},
        # the parser is set and the stack already waits for its end
        {"refused": ["</think>"], "tools": vllm(reasoning_parser="qwen3"),
         "build": built(end="</think>"), "reasoning": "mask_after_end"},
        # xgrammar told enabled already
        {"refused": ["</think>"], "format_end": "</think>", "build": built(),
         "tools": ToolsRequest("xgrammar", "qwen_3", (TOOL,), reasoning="enabled")},
        # a log line accepted, but a tag was built: no strict setting explains it
        {"refused": [], "tools": vllm(), "build": built(), "log_rejected": True},
        # accepted, no log line: nothing to fix
        {"refused": [], "tools": vllm(), "build": NO_TAG},
        # a strict tool already: the no-tag reason is another
        {"refused": [], "build": NO_TAG, "log_rejected": True,
         "tools": vllm(tools=({"type": "function", "function": {"name": "f", "strict": True}},))},
        # a JSON Schema's refusal that no preset takes
        {"refused": ["x"], "tools": None, "build": None},
    ],
)  # fmt: skip
def test_no_setting_when_nothing_reported_names_one(kwargs: dict[str, Any]) -> None:
    assert setting_to_try(parsers=PARSERS, **kwargs) is None


def _result(refusal: Refusal | None, accepted: bool) -> ReplayResult:
    return ReplayResult(accepted, False, (), None, refusal=refusal)


def _refusal(cause: str | None) -> Refusal:
    summary = MaskSummary(allowed_count=3, vocab_size=248320, allowed_ids=(1, 2, 3),
                          blocked_classes=(), longest_allowed=10)  # fmt: skip
    return Refusal(0, 248069, "</think>", True, (), "", summary, ("<", "<t", "<tool_call>"), cause)


def test_every_replay_has_its_cause_in_words() -> None:
    tag = cause_words(_result(_refusal("'</think>' is refused here."), False), None, from_log=True)
    assert tag == "'</think>' is refused here."
    bare = cause_words(_result(_refusal(None), False), None, from_log=True)
    assert bare == "'</think>' (id 248069) is not among the 3 tokens the grammar allows at token #0"
    log = cause_words(_result(None, True), None, from_log=True)
    assert log is not None and "this setup accepts them" in log
    assert cause_words(_result(None, True), None, from_log=False) is None


def test_the_pickers_fields_are_the_request_source_s_serve_flags() -> None:
    """One set of flags: each picker's field of the tools source is a serve flag of a request
    source, and a field the tools source takes."""
    assert set(SERVE_FIELDS.values()) <= set(SERVE_FLAGS)
    source = {"builder": "xgrammar", "format": "qwen_3", "tools": [TOOL]}
    values = {"reasoning_parser": "qwen3", "strict_level": "function", "strict_tool_calling": True}
    request = parse_tools(json.dumps(source | {f: values[f] for f in SERVE_FIELDS})).request
    assert {f: getattr(request, f) for f in SERVE_FIELDS} == values
    assert dataclasses.is_dataclass(request)
