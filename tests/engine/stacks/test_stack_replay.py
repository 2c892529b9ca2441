"""Replay under a serving stack (issue #40): the rows each real vLLM release masks with.

Both shipped stacks run for real (``make stacks``: vLLM 0.32.0's virtualenv, and the 0.34.0
wheel layered over it); the oracle is ``mask_oracle.py``, each release called the obvious way in
its own environment. The model is Qwen3.6's tokenizer (``</think>`` 248069, ``<tool_call>``
248058, ``\\n\\n`` 271, ``\\n`` 198).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine
from app.engine.grammars.spec import CompileOptions, GrammarSpec
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.records import ReplayResult
from app.engine.stacks import runner
from app.engine.stacks.replay import ServeFlags, stack_replay
from app.settings import Settings
from app.vocabulary import GrammarKind
from tests.vllm_oracle import run_vllm

STACKS = ("vllm-0.32.0", "vllm-0.34.0")
THINK_END, NN, TOOL_CALL, NL = 248069, 271, 248058, 198
#: vLLM issue #46149's generated ids: the reasoning closed, a blank line, then the call.
ISSUE_46149 = [THINK_END, NN, TOOL_CALL, NL]
SEARCH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
ORACLE = Path(__file__).resolve().with_name("mask_oracle.py")


def tools_source(**fields: Any) -> str:
    return json.dumps({"builder": "vllm", "format": "hermes", "tools": [SEARCH], **fields})


def replay(
    settings: Settings,
    qwen: Engine[Any],
    stack: str,
    source: str,
    ids: list[int],
    *,
    kind: GrammarKind = GrammarKind.TOOLS,
    serve: ServeFlags | None = None,
    text: str | None = None,
) -> ReplayResult:
    grammar = qwen.compile(GrammarSpec(kind, source, CompileOptions()))
    return stack_replay(
        runner(settings, stack),
        grammar,
        qwen.model.tokens,
        tokenizer=qwen.tools.tokenizer,
        text=text,
        token_ids=ids,
        bitmask_for=range(len(ids) + 8),
        serve=serve,
    )


@pytest.mark.parametrize("stack", STACKS)
def test_issue_46149_think_end_unmasked_and_the_blank_line_refused_with_the_tags_start(
    settings: Settings, qwen: Engine[Any], stack: str
) -> None:
    source = tools_source(tool_choice="required", reasoning_parser="qwen3")
    result = replay(settings, qwen, stack, source, ISSUE_46149)
    first, second = result.tokens[:2]
    assert first.token_id == THINK_END and first.accepted and not first.masked
    assert second.token_id == NN and not second.accepted and second.masked
    assert not result.accepted and result.rejection and result.rejection.token_index == 1
    cause = result.refusal.cause if result.refusal else None
    assert cause is not None
    version = stack.removeprefix("vllm-")
    assert f"vLLM {version} built this tag" in cause
    assert "it begins with" in cause and "<tool_call>" in cause
    assert "the text after '</think>' starts with '\\n\\n'" in cause
    assert result.mask_by == {"stack": stack, "library": "xgrammar", "version": "0.2.8"}


@pytest.mark.parametrize("stack", STACKS)
def test_text_then_tool_call_ends_the_reasoning_implicitly(
    settings: Settings, qwen: Engine[Any], stack: str
) -> None:
    source = tools_source(tool_choice="required", reasoning_parser="qwen3")
    call = qwen.model.tokens.encode('{"name": "search", "arguments": {"query": "x"}}\n')
    ids = [*qwen.model.tokens.encode("Let me look."), TOOL_CALL, NL, *call]
    result = replay(settings, qwen, stack, source, ids)
    at = ids.index(TOOL_CALL)
    assert result.accepted, result.refusal
    assert not any(t.masked for t in result.tokens[: at + 1])  # the call start's row: reasoning
    after = result.tokens[at + 1]
    assert after.masked and after.allowed_count < 10  # the grammar took <tool_call>: "\n" next
    # the same call's text without the marker is refused once the model has reasoned
    bad = replay(settings, qwen, stack, source, [THINK_END, *call])
    assert not bad.accepted and bad.refusal and bad.refusal.cause
    assert "<tool_call>" in bad.refusal.cause


@pytest.mark.parametrize("stack", STACKS)
def test_required_with_strict_calling_off_is_the_json_schema_the_stack_uses(
    settings: Settings, qwen: Engine[Any], stack: str
) -> None:
    source = tools_source(tool_choice="required", strict_tool_calling=False)
    grammar = qwen.compile(GrammarSpec(GrammarKind.TOOLS, source, CompileOptions()))
    assert grammar.tools is not None and grammar.tools.tag is None  # no tag: vLLM's JSON path
    prose = replay(settings, qwen, stack, source, [], text="Sure, searching now.")
    assert not prose.accepted and prose.rejection and prose.rejection.token_index == 0
    assert prose.refusal and prose.refusal.cause and "JSON Schema" in prose.refusal.cause
    calls = '[{"name": "search", "parameters": {"query": "x"}}]'
    called = replay(settings, qwen, stack, source, [], text=calls)
    assert called.accepted and all(t.masked for t in called.tokens)


def _bit(result: ReplayResult, index: int, token_id: int) -> bool:
    data = result.tokens[index].bitmask
    assert data is not None
    return bool(data[token_id >> 3] >> (token_id & 7) & 1)


def test_an_unmasked_step_is_what_the_stack_applies_0_34_blocks_an_implicit_end(
    settings: Settings, qwen: Engine[Any]
) -> None:
    schema = json.dumps({"type": "object"})
    serve = ServeFlags(reasoning_parser="qwen3")
    ids = qwen.model.tokens.encode("Hmm")
    old = replay(settings, qwen, "vllm-0.32.0", schema, ids, kind=GrammarKind.JSON_SCHEMA,
                 serve=serve)  # fmt: skip
    new = replay(settings, qwen, "vllm-0.34.0", schema, ids, kind=GrammarKind.JSON_SCHEMA,
                 serve=serve)  # fmt: skip
    assert not old.tokens[0].masked and not new.tokens[0].masked
    vocab = qwen.model.tokens.vocab_size
    assert old.tokens[0].allowed_count == vocab  # 0.32.0: every token while reasoning
    assert new.tokens[0].allowed_count == vocab - 1  # 0.34.0: all but <tool_call>
    assert _bit(old, 0, TOOL_CALL) and not _bit(new, 0, TOOL_CALL)
    blocked = replay(settings, qwen, "vllm-0.34.0", schema, [*ids, TOOL_CALL],
                     kind=GrammarKind.JSON_SCHEMA, serve=serve)  # fmt: skip
    assert blocked.refusal and blocked.refusal.cause
    assert "_masked_reasoning_ends" in blocked.refusal.cause


CASES: list[tuple[str, dict[str, Any], list[int]]] = [
    ("required", {"tool_choice": "required"}, ISSUE_46149),
    ("required", {"tool_choice": "required"}, [9707, TOOL_CALL, NL, 4913]),
    ("named", {"tool_choice": {"type": "function", "function": {"name": "search"}}},
     [THINK_END, TOOL_CALL, NL]),
    ("auto strict", {"tool_choice": "auto", "tools": [{**SEARCH, "function": {
        **SEARCH["function"], "strict": True}}]}, [THINK_END, NN, TOOL_CALL, NL, 4913]),
]  # fmt: skip


@pytest.mark.parametrize("stack", STACKS)
def test_tags_rows_and_reasoning_end_equal_the_oracles(
    settings: Settings, qwen: Engine[Any], stack: str
) -> None:
    cases = []
    results = []
    for _, fields, ids in CASES:
        source = tools_source(reasoning_parser="qwen3", **fields)
        results.append(replay(settings, qwen, stack, source, ids))
        cases.append(
            {
                "tokenizer": qwen.tools.tokenizer,
                "vocab_size": qwen.model.tokens.vocab_size,
                "format": "hermes",
                "tools": fields.get("tools", [SEARCH]),
                "tool_choice": fields["tool_choice"],
                "reasoning_parser": "qwen3",
                "token_ids": ids,
            }
        )
    want = run_vllm(ORACLE.read_text(), {"cases": cases}, stack=stack)["results"]
    for case, got, oracle in zip(cases, results, want, strict=True):
        request = ToolsRequest(
            builder="vllm",
            format="hermes",
            tools=tuple(case["tools"]),
            tool_choice=case["tool_choice"],
            reasoning_parser="qwen3",
        )
        assert runner(settings, stack).build(request, qwen.tools.tokenizer).tag == oracle["tag"]
        rows = [base64.b64encode(t.bitmask or b"").decode() for t in got.tokens]
        assert rows == oracle["rows"], case
        # the step after the reasoning's end (explicit or implicit) is the first masked one
        first_masked = next((i for i, t in enumerate(got.tokens) if t.masked), None)
        end = oracle["reasoning_end"]
        assert first_masked == (None if end is None else end["index"] + 1), case
    assert any(o["reasoning_end"] and o["reasoning_end"]["implicit"] for o in want)
