"""The mask/accept cross-check: which ids each step tries, and a flipped mask bit caught."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from app.engine import Disagreement, Engine, Session, StepRecord, StopReason
from app.engine.masking.probe import PROBE_SAMPLE, probe_ids
from tests.engine.conftest import faulty_nested_session, mask_bit, nested_session
from tests.engine.faults import flip_bit


def _allowed(n: int, allowed_ids: list[int]) -> np.ndarray:
    allowed = np.zeros(n, dtype=bool)
    allowed[allowed_ids] = True
    return allowed


def test_the_chosen_and_top_tokens_come_first_then_a_sample_of_each_side() -> None:
    allowed = _allowed(1000, list(range(0, 1000, 3)))
    ids = probe_ids(allowed, chosen=3, top=[3, 4, 6, 5], index=7)
    assert ids[:4] == [3, 4, 6, 5]
    others = ids[4:]
    assert len(others) == len(set(others)) == 2 * PROBE_SAMPLE
    assert not set(others) & {3, 4, 5, 6}
    assert sum(bool(allowed[i]) for i in others) == PROBE_SAMPLE


def test_the_sample_depends_only_on_the_mask_and_the_step_index() -> None:
    allowed = _allowed(5000, list(range(100, 3000)))
    assert probe_ids(allowed, chosen=1, top=[2], index=4) == probe_ids(
        allowed, chosen=1, top=[2], index=4
    )
    assert probe_ids(allowed, chosen=1, top=[2], index=4) != probe_ids(
        allowed, chosen=1, top=[2], index=5
    )


def test_a_small_side_is_tried_whole() -> None:
    allowed = _allowed(200, [10, 11, 12])
    ids = probe_ids(allowed, chosen=10, top=[10, 50], index=0)
    assert sorted(i for i in ids if allowed[i]) == [10, 11, 12]
    assert len(ids) == 2 + 2 + PROBE_SAMPLE


def test_every_step_of_a_run_is_probed_and_agrees(engine: Engine) -> None:
    session = nested_session(engine)
    for record in session.run(12):
        named = {record.token_id, *(t.token_id for t in record.top)}
        named_allowed = sum(mask_bit(record, t) for t in named)
        allowed_others = record.allowed_count - named_allowed
        blocked_others = record.vocab_size - record.allowed_count - (len(named) - named_allowed)
        sample = min(PROBE_SAMPLE, allowed_others) + min(PROBE_SAMPLE, blocked_others)
        assert record.probe.checked == len(named) + sample
        assert record.probe.disagree == () and record.mask_accept_agree
        assert record.engine == "xgrammar"


def _flipped_at(engine: Engine, index: int, token_id: int) -> Session:
    """A nested session whose masking engine fills step ``index``'s mask with one bit of
    ``token_id`` flipped (a masking engine that lies, passed in through the constructor)."""

    def flipped(bitmask: torch.Tensor, step: int) -> None:
        if step == index:
            flip_bit(bitmask, token_id)

    return faulty_nested_session(engine, after_fill=flipped)


@pytest.fixture(scope="module")
def undisturbed(engine: Engine) -> list[StepRecord]:
    return nested_session(engine).run(30)


def _run_flipped(
    engine: Engine, undisturbed: list[StepRecord], pick: Callable[[StepRecord], int | None]
) -> tuple[int, int, Session, list[StepRecord]]:
    """At the first step where ``pick`` names a token, flip its mask bit; run past that step."""
    index, victim = next((r.index, t) for r in undisturbed if (t := pick(r)) is not None)
    session = _flipped_at(engine, index, victim)
    return index, victim, session, session.run(index + 3)


def test_an_over_masked_token_is_named_by_the_probe(
    engine: Engine, undisturbed: list[StepRecord]
) -> None:
    def second_allowed(r: StepRecord) -> int | None:
        allowed = [t.token_id for t in r.top if t.allowed and t.token_id != r.token_id]
        return allowed[0] if allowed else None

    index, victim, _, records = _run_flipped(engine, undisturbed, second_allowed)
    flipped = records[index]
    assert not mask_bit(flipped, victim)
    assert flipped.probe.disagree == (Disagreement(token_id=victim, mask=False, accept=True),)
    assert not flipped.mask_accept_agree
    assert flipped.token_id == undisturbed[index].token_id
    assert flipped.allowed_count == undisturbed[index].allowed_count - 1
    assert all(r.mask_accept_agree for r in records if r.index != index)


def test_an_under_masked_token_is_named_and_its_refusal_stops_the_session(
    engine: Engine, undisturbed: list[StepRecord]
) -> None:
    def most_probable_blocked(r: StepRecord) -> int | None:
        return None if r.top[0].allowed else r.top[0].token_id

    index, victim, session, records = _run_flipped(engine, undisturbed, most_probable_blocked)
    assert session.stop_reason is StopReason.REJECTED and len(records) == index + 1
    flipped = records[index]
    assert flipped.token_id == victim  # greedy took the token the flipped mask let through
    assert flipped.probe.disagree == (Disagreement(token_id=victim, mask=True, accept=False),)
    assert flipped.to_dict()["probe"]["disagree"] == [
        {"token_id": victim, "mask": True, "accept": False}
    ]


@pytest.mark.parametrize("index", [0, 3])
def test_probing_leaves_the_matcher_where_it_was(engine: Engine, index: int) -> None:
    session = nested_session(engine)
    session.run(index)
    before = session.state
    session.step()
    session.back(1)
    assert session.state == before
