"""A ``tools`` spec compiled: the builder's tag through the structural-tag path (real xgrammar
compile workers, a one-character-a-token vocabulary), its errors placed in the tools source, and
no tag compiled as any text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import xgrammar as xgr

from app.engine.grammars.compiler import GrammarCompiler
from app.engine.grammars.spec import GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import TAG_NOT_CARRIED
from app.engine.grammars.tools.base import (
    BuilderName,
    ToolFormat,
    ToolsBuild,
    ToolsBuilder,
    ToolsRequest,
)
from app.engine.grammars.tools.builders import builder
from app.engine.grammars.tools.compile import ToolsCompiler
from app.exceptions import GrammarError

VOCAB = [chr(i) for i in range(32, 127)] + ["\n"]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def source(**fields: Any) -> str:
    data = {
        "builder": "xgrammar",
        "format": "qwen_3",
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
        "tool_choice": "required",
        "reasoning": "disabled",
        **fields,
    }
    return json.dumps(data, indent=2)


def spec(text: str) -> GrammarSpec:
    return GrammarSpec(GrammarKind.TOOLS, text)


@pytest.fixture(scope="module")
def compiler() -> Iterator[GrammarCompiler]:
    with GrammarCompiler(xgr.TokenizerInfo(VOCAB), workers=1) as started:
        yield started


class NoTag:
    """A builder that builds no tag (as vLLM's does for ``auto`` with tools not strict)."""

    name: BuilderName = "vllm"

    def formats(self) -> list[ToolFormat]:
        return [ToolFormat("vllm", "hermes", False, None, True)]

    def build(self, request: ToolsRequest, tokenizer: str) -> ToolsBuild:
        return ToolsBuild(None, f"no strict tool for {tokenizer}", None, {"vllm": "0.32.0"})


def _builders(name: str) -> ToolsBuilder:
    return NoTag() if name == "vllm" else builder(name)


def test_a_tools_spec_compiles_as_its_tag_and_is_cached(compiler: GrammarCompiler) -> None:
    tools = ToolsCompiler("the-tokenizer")
    result = tools.compile(spec(source()), compiler.compile)
    assert result.spec.kind is GrammarKind.TOOLS and result.tools is not None
    assert result.tools.tag is not None and "get_weather" in result.grammar_text
    assert result.not_carried == TAG_NOT_CARRIED
    assert result.unconstrained == (
        "free text between and after calls (never '<think>', '</think>') (the output begins "
        "with a call)",
    )
    again = tools.cached(spec(source()), compiler.cached)
    assert again is not None and again.cached and again.tools == result.tools
    assert tools.cached(spec(source(reasoning="auto")), compiler.cached) is None


def test_no_tag_compiles_as_any_text_and_says_so(compiler: GrammarCompiler) -> None:
    tools = ToolsCompiler("the-tokenizer", builders=_builders)
    result = tools.compile(spec(source(builder="vllm", format="hermes")), compiler.compile)
    assert result.tools is not None and result.tools.tag is None
    (said,) = result.unconstrained
    assert said.startswith("no tag: the call is not constrained (no strict tool for "
                           "the-tokenizer)") and "every token is allowed" in said  # fmt: skip
    matcher = xgr.GrammarMatcher(result.compiled)
    bitmask = xgr.allocate_token_bitmask(1, len(VOCAB))
    matcher.fill_next_token_bitmask(bitmask)
    assert bool(torch.all(bitmask == -1))  # 96 tokens, 3 words: every bit set, all allowed
    assert matcher.accept_string("anything at all, <tool_call> too")


def test_a_schema_xgrammar_refuses_is_placed_in_the_tools_source(compiler: GrammarCompiler) -> None:
    broken = {"type": "object", "properties": {"city": {"$ref": "#/nowhere"}}}
    text = source(tools=[{"function": {"name": "get_weather", "parameters": broken}}])
    with pytest.raises(GrammarError) as caught:
        ToolsCompiler("t").compile(spec(text), compiler.compile)
    error = caught.value
    assert error.pointer == "/tools/0/function/parameters/properties/city"
    assert error.line is not None and '"city"' in text.splitlines()[error.line - 1]


def test_a_model_not_derived_is_refused_at_its_reference(compiler: GrammarCompiler) -> None:
    text = source(tools=[{"function": {"name": "f", "parameters": {"$model": "Weather"}}}],
                  pydantic="class Weather(BaseModel):\n    city: str\n")  # fmt: skip
    with pytest.raises(GrammarError) as caught:
        ToolsCompiler("t").compile(spec(text), compiler.compile)
    assert caught.value.pointer == "/tools/0/function/parameters/$model"
    assert "derived from the pydantic field first" in caught.value.message
