"""Helpers for the engine tests: a session on the nested example, the real model under it."""

from __future__ import annotations

from app.engine import (
    ChatMessage,
    Engine,
    GrammarKind,
    GrammarSpec,
    SamplingParams,
    Session,
    StepRecord,
    with_schema,
)
from app.engine.mask import words_from_bytes
from app.examples import load_examples

NESTED = next(e for e in load_examples() if e.id == "nested")


def nested_session(
    engine: Engine, *, max_tokens: int = NESTED.max_tokens, sampling: SamplingParams | None = None
) -> Session:
    """A session on the nested example (schema in the prompt), greedy unless told otherwise."""
    source = NESTED.source()
    return engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, source),
        messages=[
            ChatMessage("system", with_schema(NESTED.system, source)),
            ChatMessage("user", NESTED.prompt),
        ],
        max_tokens=max_tokens,
        sampling=sampling,
    )


def mask_bit(record: StepRecord, token_id: int) -> bool:
    """The bit of ``token_id`` in the mask the record was taken under."""
    words = words_from_bytes(record.bitmask)
    return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)
