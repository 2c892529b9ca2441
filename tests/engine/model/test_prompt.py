from __future__ import annotations

import json

import pytest

from app.engine import ChatMessage, Engine, render_prompt, with_schema
from app.exceptions import InvalidInput


def test_messages_go_through_the_chat_template(engine: Engine) -> None:
    tokens = engine.model.tokens
    prompt = render_prompt(tokens, [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    assert prompt.text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert prompt.text.endswith("<|im_start|>assistant\n")
    assert list(prompt.token_ids) == tokens.encode(prompt.text)
    assert prompt.token_ids[0] == 1  # <|im_start|> is one special token


def test_a_raw_prompt_is_taken_as_is(engine: Engine) -> None:
    prompt = render_prompt(engine.model.tokens, raw="Answer: ")
    assert prompt.text == "Answer: "


def test_a_prompt_is_required(engine: Engine) -> None:
    with pytest.raises(InvalidInput):
        render_prompt(engine.model.tokens)
    with pytest.raises(InvalidInput):
        render_prompt(engine.model.tokens, raw="")
    with pytest.raises(InvalidInput):
        ChatMessage("robot", "hi")


def test_with_schema_appends_the_schema() -> None:
    text = with_schema("Reply in JSON.", '{\n  "type": "object"\n}')
    assert text == 'Reply in JSON.\nThe JSON must follow this schema:\n{"type": "object"}'
    assert json.loads(text.splitlines()[-1]) == {"type": "object"}
