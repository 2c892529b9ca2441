"""Speculative drafts and the rollback check on the real model, under both masking engines."""

from __future__ import annotations

import pytest

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, MaskingLibrary, with_schema
from app.engine.masking import new_masking
from app.engine.model.prompt import render_prompt
from app.engine.records import RollbackRecord
from app.engine.stepper.session import Session
from tests.engine.conftest import NESTED
from tests.engine.faults import BrokenRollback

LIBRARIES = [MaskingLibrary.XGRAMMAR, MaskingLibrary.LLGUIDANCE]
STEPS = 24


def _session(
    engine: Engine, library: MaskingLibrary, *, draft_tokens: int, broken: bool = False
) -> Session:
    """The nested example (its schema in the prompt, which prompt lookup then finds) under
    ``library``; with ``broken``, the matcher's rollback is broken on purpose."""
    source = NESTED.source()
    compiled = engine.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, source, library=library))
    messages = [
        ChatMessage("system", with_schema(NESTED.system, source)),
        ChatMessage("user", NESTED.prompt),
    ]
    prompt = render_prompt(engine.model.tokens, messages)
    masking = new_masking(compiled)
    return Session(
        engine.model,
        compiled,
        prompt,
        masking=BrokenRollback(masking) if broken else masking,
        forward=engine.model.open_forward(prompt.token_ids),
        max_tokens=STEPS,
        draft_tokens=draft_tokens,
    )


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.value)
def test_drafts_are_validated_and_rolled_back_on_both_engines(
    engine: Engine, library: MaskingLibrary
) -> None:
    plain = _session(engine, library, draft_tokens=0).run(STEPS)
    session = _session(engine, library, draft_tokens=4)
    records = session.run(STEPS)
    # Drafts change nothing the step records but its drafts and rollback check.
    assert [{**r.without_timings(), "drafts": None} for r in records] == [
        r.without_timings() for r in plain
    ]
    assert all(r.drafts is not None for r in records) and all(r.drafts is None for r in plain)
    taken = [r for r in records if r.drafts is not None and r.drafts.accepted]
    assert taken, "the schema in the prompt gives prompt lookup drafts the grammar takes"
    assert [r.rollback for r in taken] == [RollbackRecord(checked=True)] * len(taken)
    # Back, and the same steps again: equal but for the rollback check of that back.
    session.back(10)
    again = session.run(10)
    assert again[0].rollback == RollbackRecord(checked=True)
    assert [r.without_timings() for r in session.steps] == [r.without_timings() for r in records]


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.value)
def test_a_broken_rollback_is_flagged_on_both_engines(
    engine: Engine, library: MaskingLibrary
) -> None:
    session = _session(engine, library, draft_tokens=4, broken=True)
    records = session.run(STEPS)
    flagged = [r for r in records if r.rollback is not None and not r.rollback.restored]
    assert flagged, "a draft rollback that leaves the matcher a token ahead is seen"
    assert all(r.drafts is not None and r.drafts.accepted for r in flagged)
    assert any(r.rollback is not None and r.rollback.differs for r in flagged)
