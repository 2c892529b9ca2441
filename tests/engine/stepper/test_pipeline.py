"""The step pipeline's rules on the toy model: checks overlapped with the next forward pass,
rollbacks checked against copies of the matcher, speculative drafts validated and rolled back."""

from __future__ import annotations

import pytest

from app.engine import GrammarKind
from app.engine.masking.drafts import propose_drafts
from app.engine.masking.rollback_check import CHECKPOINTS
from app.engine.records import RollbackRecord, StepRecord
from app.exceptions import InvalidInput
from tests.engine.conftest import mask_bit
from tests.engine.toy_forward import toy_grammar, toy_session

SCHEMA = (
    '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},'
    ' "c": {"type": "array", "items": {"type": "string"}}}, "required": ["a", "b", "c"]}'
)
JSON = toy_grammar(GrammarKind.JSON_SCHEMA, SCHEMA)
# A prompt the output repeats, so that prompt lookup finds drafts.
PROMPT = '{"a": 1, "b": true, "c": ["ab", "ba"]}'
RESTORED = RollbackRecord(checked=True)


def _plain(records: list[StepRecord]) -> list[dict[str, object]]:
    return [r.without_timings() for r in records]


def _fresh(records: list[StepRecord]) -> list[dict[str, object]]:
    """The records as a run without drafts records them."""
    return [{**r.without_timings(), "drafts": None} for r in records]


def test_overlapped_checks_land_on_every_record_as_inline_checks_do() -> None:
    inline, _ = toy_session(JSON, max_tokens=64, overlap=False)
    overlapped, forward = toy_session(JSON, max_tokens=64)
    expected = inline.run(64)
    records = overlapped.run(64)
    assert _plain(records) == _plain(expected)
    assert [r.probe for r in records] == [r.probe for r in expected]
    assert all(r.probe.checked > 0 and r.total_ms >= r.forward_ms for r in records)
    # No forward pass ran for nothing: the last step stopped the session, so none followed it.
    assert forward.forward_passes == len(records)


def test_the_next_forward_pass_is_run_during_the_step_and_used_by_the_next() -> None:
    session, forward = toy_session(JSON, max_tokens=64)
    session.step()
    assert forward.forward_passes == 2  # step 1's pass ran during step 0
    session.step()
    assert forward.forward_passes == 3
    session.back(1)
    session.step()  # the prefix changed: its pass runs again, and the next one with it
    assert forward.forward_passes == 5


@pytest.mark.parametrize("depth", [1, 3, CHECKPOINTS + 4])
def test_a_correct_rollback_is_checked_and_not_flagged(depth: int) -> None:
    session, _ = toy_session(JSON, max_tokens=64)
    original = session.run(depth + 6)
    assert all(r.rollback is None for r in original)
    session.back(depth)
    again = session.run(depth)
    assert again[0].rollback == RESTORED
    assert all(r.rollback is None for r in again[1:])
    assert _plain(session.steps) == _plain(original)
    assert again[0].to_dict()["rollback"] == {
        "checked": True,
        "differs": [],
        "jump_forward_differs": False,
        "terminated_differs": False,
    }


def test_a_force_at_an_earlier_step_checks_its_rollback() -> None:
    session, _ = toy_session(JSON, max_tokens=64)
    records = session.run(10)
    forced = session.force_at(4, records[4].token_id)
    assert forced.rollback == RESTORED and forced.forced


def _differing_step(records: list[StepRecord], start: int) -> int:
    """A step from ``start`` on whose mask differs from the next step's (a rollback that leaves
    the matcher one token ahead shows there)."""
    return next(r.index for r in records[start:-1] if r.bitmask != records[r.index + 1].bitmask)


@pytest.mark.parametrize("deep", [False, True])
def test_a_broken_rollback_is_flagged(deep: bool) -> None:
    session, _ = toy_session(JSON, max_tokens=64, broken_rollback=True)
    records = session.run(CHECKPOINTS + 12)
    # deep: a back past the copies kept, checked against the records
    index = _differing_step(records, 0 if deep else CHECKPOINTS + 2)
    session.back(len(records) - index)
    record = session.step()
    rollback = record.rollback
    assert rollback is not None and rollback.checked and not rollback.restored
    truth = set(_bits(records[index])) ^ set(_bits(records[index + 1]))
    assert set(rollback.differs) == truth


def _bits(record: StepRecord) -> list[int]:
    return [t for t in range(record.vocab_size) if mask_bit(record, t)]


def test_drafts_are_validated_and_rolled_back_without_changing_the_tokens() -> None:
    plain, _ = toy_session(JSON, prompt=PROMPT, max_tokens=64)
    drafted, _ = toy_session(JSON, prompt=PROMPT, max_tokens=64, draft_tokens=3)
    expected = plain.run(64)
    records = drafted.run(64)
    assert _fresh(records) == _plain(expected)
    drafts = [r.drafts for r in records]
    assert all(d is not None and d.accepted <= d.proposed <= 3 for d in drafts)
    taken = [r for r in records if r.drafts is not None and r.drafts.accepted]
    assert taken, "prompt lookup should find drafts the grammar takes"
    assert all(r.rollback == RESTORED for r in taken)
    assert all(r.rollback is None for r in records if r.drafts and not r.drafts.accepted)
    assert any(r.drafts and r.drafts.accepted < r.drafts.proposed for r in records)


def test_a_broken_draft_rollback_is_flagged() -> None:
    session, _ = toy_session(
        JSON, prompt=PROMPT, max_tokens=64, draft_tokens=3, broken_rollback=True
    )
    records = session.run(64)
    flagged = [r for r in records if r.rollback is not None and not r.rollback.restored]
    assert flagged, "a draft rollback that leaves the matcher one token ahead shows"
    assert all(r.drafts is not None and r.drafts.accepted for r in flagged)


@pytest.mark.parametrize(
    ("context", "n", "drafts"),
    [
        ([1, 2, 3, 9, 1, 2, 3], 2, [9, 1]),  # the longest suffix (3 tokens) found
        ([5, 1, 2, 7, 1, 2], 3, [7, 1, 2]),
        ([4, 8, 4], 5, [8, 4]),  # a single-token suffix, continuation up to the end
        ([1, 2, 3], 4, []),  # nothing repeats
        ([1, 2, 1], 0, []),
        ([7, 1, 7, 2, 7], 1, [2]),  # the latest earlier occurrence wins
    ],
)
def test_prompt_lookup_proposes_what_followed_the_suffix(
    context: list[int], n: int, drafts: list[int]
) -> None:
    assert propose_drafts(context, n) == drafts


def test_draft_tokens_below_zero_are_refused() -> None:
    with pytest.raises(InvalidInput, match="draft_tokens must be at least 0"):
        toy_session(JSON, draft_tokens=-1)
