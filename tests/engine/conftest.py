"""Helpers for the engine tests: a session on the nested example, the real model under it."""

from __future__ import annotations

from collections.abc import Callable

import torch

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
from app.engine.masking import new_masking
from app.engine.model.prompt import render_prompt
from app.examples import load_examples
from tests.engine.faults import Fault, FaultyForward, FaultyMasking

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


def faulty_nested_session(
    engine: Engine,
    fault: Fault | None = None,
    *,
    after_fill: Callable[[torch.Tensor, int], None] | None = None,
    sampling: SamplingParams | None = None,
) -> Session:
    """:func:`nested_session` with its engines wrapped: ``fault`` fails the forward or masking
    engine's method it names, ``after_fill`` rewrites each mask (faults go in through the
    session's constructor, as :meth:`Engine.new_session` builds it)."""
    source = NESTED.source()
    compiled = engine.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, source))
    messages = [
        ChatMessage("system", with_schema(NESTED.system, source)),
        ChatMessage("user", NESTED.prompt),
    ]
    prompt = render_prompt(engine.model.tokens, messages)
    fault = fault or Fault("", when=lambda: False)
    return Session(
        engine.model,
        compiled,
        prompt,
        masking=FaultyMasking(new_masking(compiled), fault, after_fill=after_fill),
        forward=FaultyForward(engine.model.open_forward(prompt.token_ids), fault),
        sampling=sampling,
        max_tokens=NESTED.max_tokens,
        top_k=engine.settings.top_k,
    )


def mask_bit(record: StepRecord, token_id: int) -> bool:
    """The bit of ``token_id`` in the mask the record was taken under."""
    words = words_from_bytes(record.bitmask)
    return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)
