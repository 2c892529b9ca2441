"""Chat templates: which one renders (pasted, the tokenizer's, the shipped one with its
licence, the stack's encoder, which renders in a stack: test_chat_templates_stack.py), and the
token count with and without each tools option (a template that renders `strict`, as vLLM
#52741 reports). Real Qwen3.6 and DeepSeek V4 tokenizers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine
from app.engine.factories.tokenizer_only import TokenizerModel
from app.engine.model.chat_templates import ChatTemplate, option_counts, render, template_for
from app.exceptions import InvalidInput
from tests.engine.shipped import qwen_engine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine[TokenizerModel]]:
    with qwen_engine(tmp_path_factory.mktemp("qwen")) as engine:
        yield engine


def test_the_shipped_qwen_tokenizer_gets_its_familys_template_with_its_licence(
    qwen: Engine[TokenizerModel],
) -> None:
    tokens = qwen.model.tokens
    assert not getattr(tokens.tokenizer, "chat_template", None)  # the package ships none
    template = template_for(tokens, shipped="qwen3.6")
    assert (template.origin, template.licence) == ("shipped", "Apache-2.0")
    assert "Qwen3.6" in template.source
    rendered = render(template, tokens, MESSAGES, tools=[WEATHER])
    assert rendered.text.endswith("<|im_start|>assistant\n<think>\n")
    assert rendered.tokens == len(tokens.encode(rendered.text))
    pasted = template_for(tokens, shipped="qwen3.6", pasted="{{ messages[0].content }}")
    assert render(pasted, tokens, MESSAGES).text == "Weather in Paris?"
    deepseek = template_for(tokens, shipped="deepseek-v4")  # no template: the stack's encoder
    assert (deepseek.origin, deepseek.mode, deepseek.text) == ("stack", "deepseek_v4", None)
    with pytest.raises(InvalidInput) as unbound:  # rendered only in a stack (its own tests)
        render(deepseek, tokens, MESSAGES)
    assert unbound.value.pointer == "/stack"
    with pytest.raises(InvalidInput) as caught:
        template_for(tokens)
    assert caught.value.pointer == "/chat_template"


def test_a_template_that_renders_strict_changes_the_token_count(
    qwen: Engine[TokenizerModel],
) -> None:
    strict = ChatTemplate((FIXTURES / "strict.jinja").read_text(), "pasted", "#52741's shape")
    counts = {c.option: c for c in option_counts(strict, qwen.model.tokens, MESSAGES, [WEATHER])}
    assert (
        counts["strict"].changes and counts["strict"].with_option > counts["strict"].without_option
    )
    assert counts["tool_choice"].changes  # `none` renders no tools
    assert not counts["reasoning"].changes  # this template reads no enable_thinking
    shipped = template_for(qwen.model.tokens, shipped="qwen3.6")
    reasoning = option_counts(shipped, qwen.model.tokens, MESSAGES, [WEATHER])[2]
    assert reasoning.option == "reasoning" and reasoning.changes


def test_a_template_that_fails_names_the_field(qwen: Engine[TokenizerModel]) -> None:
    broken = ChatTemplate("{{ raise_exception('no') }}", "pasted", "x")
    with pytest.raises(InvalidInput) as caught:
        render(broken, qwen.model.tokens, MESSAGES)
    assert caught.value.pointer == "/chat_template" and "no" in caught.value.message
