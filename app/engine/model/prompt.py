"""The prompt a session starts from: chat messages through the model's template, or raw text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.tokens import Tokens
from app.exceptions import InvalidInput

__all__ = ["ChatMessage", "Prompt", "render_prompt", "with_schema"]

_ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True)
class ChatMessage:
    """One chat message."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidInput(f"message role must be system, user or assistant, got {self.role!r}")


@dataclass(frozen=True)
class Prompt:
    """The text the model continues, and its token ids."""

    text: str
    token_ids: tuple[int, ...]


def render_prompt(
    tokens: Tokens,
    messages: Sequence[ChatMessage] = (),
    raw: str | None = None,
) -> Prompt:
    """Render ``messages`` with the chat template (adding the assistant turn), or take ``raw``.

    Raises:
        InvalidInput: neither messages nor a raw prompt, or the result has no tokens.
    """
    if raw is not None:
        text = raw
    elif messages:
        if not getattr(tokens.tokenizer, "chat_template", None):
            raise InvalidInput("this model's tokenizer has no chat template: send a raw prompt")
        text = tokens.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            tokenize=False,
            add_generation_prompt=True,
        )
    else:
        raise InvalidInput("give chat messages or a raw prompt")
    ids = tokens.encode(text)
    if not ids:
        raise InvalidInput("the prompt is empty: the model needs at least one token to continue")
    return Prompt(text=text, token_ids=tuple(ids))


def with_schema(system: str, schema_source: str) -> str:
    """Append the JSON Schema to a system prompt, as schema-guided clients do.

    A small model that sees the field names and descriptions writes far better values than one
    that learns them only through the mask.
    """
    try:
        schema = json.dumps(json.loads(schema_source), ensure_ascii=False)
    except ValueError:
        schema = schema_source.strip()
    return f"{system}\nThe JSON must follow this schema:\n{schema}".lstrip()
