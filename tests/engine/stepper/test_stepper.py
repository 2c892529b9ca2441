"""The stepper's own rules on the toy forward engine (milliseconds a test): step, back, force,
rollback, stop reasons, the top-K and blocked-mass bookkeeping.

The masks are real xgrammar masks over a toy vocabulary; the logits are the toy engine's. What
the real model adds (its KV cache, its chat template, its vocabulary) is tested on the real model
in ``test_session.py`` and ``test_step_failures.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from app.engine import GrammarKind, SamplingParams, StepRecord, StopReason
from app.engine.mask import words_from_bytes
from app.engine.stepper.session import Session
from app.exceptions import InvalidInput, SessionFinished, TokenRefused
from tests.engine.conftest import mask_bit
from tests.engine.faults import Fault, Injected, flip_bit
from tests.engine.toy_forward import (
    END,
    EOS,
    VOCAB,
    ToyForward,
    ToyModel,
    toy_grammar,
    toy_session,
)

SCHEMA = (
    '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},'
    ' "required": ["a", "b"]}'
)
JSON = toy_grammar(GrammarKind.JSON_SCHEMA, SCHEMA)


def _popcount(record: StepRecord) -> int:
    return sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in words_from_bytes(record.bitmask))


def _plain(records: list[StepRecord]) -> list[dict[str, object]]:
    return [r.without_timings() for r in records]


def test_a_session_runs_to_the_end_of_the_grammar() -> None:
    session, _ = toy_session(JSON, max_tokens=64)
    session.run(64)
    assert session.stop_reason is StopReason.TERMINATED
    last = session.steps[-1]
    assert last.terminated and last.token_id == EOS and "<eos>" not in session.text
    validation = session.validation()
    assert validation is not None and validation.valid
    assert session.steps[0].path == "$" and session.steps[0].depth == 0
    assert {r.path for r in session.steps} >= {"$", "$.a", "$.b"}


def test_every_chosen_token_is_allowed_and_counted() -> None:
    session, _ = toy_session(JSON, max_tokens=64)
    for record in session.run(64):
        assert record.vocab_size == len(VOCAB)
        assert len(record.bitmask) == (len(VOCAB) + 31) // 32 * 4
        assert mask_bit(record, record.token_id), record.index
        assert record.allowed_count == _popcount(record)
        assert record.mask_accept_agree and record.engine == "xgrammar"


def test_top_k_rank_and_blocked_mass_are_the_raw_distribution_s() -> None:
    # With top_k the whole vocabulary, the record holds every token's raw probability.
    session, _ = toy_session(JSON, max_tokens=64, top_k=len(VOCAB))
    for record in session.run(64):
        probs = [t.prob for t in record.top]
        assert probs == sorted(probs, reverse=True) and len(record.top) == len(VOCAB)
        assert sum(probs) == pytest.approx(1.0, abs=1e-5)
        for candidate in record.top:
            assert candidate.allowed == mask_bit(record, candidate.token_id)
        blocked = sum(t.prob for t in record.top if not t.allowed)
        assert record.blocked_mass == pytest.approx(blocked, abs=1e-5)
        ids = [t.token_id for t in record.top]
        assert record.rank == ids.index(record.token_id)
        assert record.prob == pytest.approx(record.top[record.rank].prob)
        # greedy: the most probable allowed token
        assert record.token_id == next(t.token_id for t in record.top if t.allowed)
        assert record.top[0].logit is not None and math.isfinite(record.top[0].logit)


def test_a_short_top_k_is_the_head_of_the_whole_one() -> None:
    whole = toy_session(JSON, top_k=len(VOCAB))[0].run(10)
    short = toy_session(JSON, top_k=3)[0].run(10)
    for full, head in zip(whole, short, strict=True):
        assert head.top == full.top[:3]
        assert head.blocked_mass == full.blocked_mass and head.rank == full.rank


def test_a_small_allowed_set_is_listed_whole_with_its_probabilities() -> None:
    session, _ = toy_session(toy_grammar(GrammarKind.REGEX, "[ab]"), max_tokens=2)
    record = session.step()
    assert record.allowed_count == 2
    assert sorted(t.text for t in record.allowed_tokens) == ["a", "b"]
    listed = [t.prob for t in record.allowed_tokens]
    assert listed == sorted(listed, reverse=True)
    assert sum(listed) == pytest.approx(1 - record.blocked_mass, abs=1e-5)


def test_back_then_forward_reproduces_the_records() -> None:
    session, forward = toy_session(JSON, max_tokens=64)
    original = _plain(session.run(20))
    session.back(8)
    assert len(session.steps) == 12
    session.run(8)
    assert _plain(session.steps) == original
    session.back(100)  # back to the prompt
    assert session.steps == [] and session.text == "" and forward.memory_bytes == 8
    session.run(20)
    assert _plain(session.steps) == original


def test_back_then_forward_reproduces_seeded_sampling() -> None:
    sampling = SamplingParams(temperature=1.5, top_p=0.95, seed=1234)
    session, _ = toy_session(JSON, sampling=sampling, max_tokens=64)
    original = _plain(session.run(25))
    session.back(25)
    session.run(10)
    session.back(3)
    session.run(18)
    assert _plain(session.steps) == original
    greedy = _plain(toy_session(JSON, max_tokens=64)[0].run(25))
    assert original != greedy, "temperature 1.5 should leave the greedy path somewhere"


def test_back_validates_and_caps_its_count() -> None:
    session, _ = toy_session(JSON)
    session.run(3)
    with pytest.raises(InvalidInput):
        session.back(0)
    session.back(10)
    assert session.steps == [] and session.state.path == "$"
    session.back(1)  # nothing to undo: no error


def test_a_blocked_token_cannot_be_forced_and_nothing_changes() -> None:
    session, forward = toy_session(JSON)
    session.run(3)
    before, passes = _plain(session.steps), forward.forward_passes
    hello = VOCAB.index("hello")
    with pytest.raises(TokenRefused) as caught:
        session.force(hello)
    assert f"the grammar blocks token {hello} ('hello') at step 3" in caught.value.message
    assert f"of {len(VOCAB)} tokens are allowed here, e.g." in caught.value.message
    assert _plain(session.steps) == before and forward.forward_passes == passes
    fresh, _ = toy_session(JSON)
    fresh.run(4)
    assert session.step().without_timings() == fresh.steps[3].without_timings()


def test_forcing_an_allowed_token_marks_the_step() -> None:
    session, _ = toy_session(JSON, max_tokens=64)
    records = session.run(12)
    greedy = next(r for r in records[1:] if r.allowed_count > 1)
    session.back(len(records) - greedy.index)
    other = next(t for t in range(len(VOCAB)) if t != greedy.token_id and mask_bit(greedy, t))
    forced = session.force(other)
    assert forced.forced and forced.token_id == other and forced.index == greedy.index
    assert forced.mask_accept_agree and forced.allowed_count == greedy.allowed_count
    assert not session.step().forced


def test_force_at_goes_back_and_checks_the_recorded_mask() -> None:
    session, _ = toy_session(JSON, max_tokens=64)
    records = session.run(12)
    at = next(r.index for r in records[1:] if r.allowed_count > 1)
    with pytest.raises(TokenRefused):
        session.force_at(at, VOCAB.index("hello"))
    assert _plain(session.steps) == _plain(records)  # refused: nothing changed
    chosen = records[at].token_id
    other = next(t for t in range(len(VOCAB)) if t != chosen and mask_bit(records[at], t))
    forced = session.force_at(at, other)
    assert len(session.steps) == at + 1 and forced.index == at and forced.forced
    assert _plain(session.steps[:at]) == _plain(records[:at])
    with pytest.raises(InvalidInput):
        session.force_at(at + 2, other)  # past the next step


def test_out_of_range_token_ids_are_refused() -> None:
    session, _ = toy_session(JSON)
    for token_id in (len(VOCAB), -1):
        with pytest.raises(InvalidInput, match=f"between 0 and {len(VOCAB) - 1}"):
            session.force(token_id)


def test_max_tokens_stops_and_back_reopens() -> None:
    session, _ = toy_session(JSON, max_tokens=3)
    assert len(session.run(10)) == 3
    assert session.stop_reason is StopReason.MAX_TOKENS
    validation = session.validation()
    assert validation is not None and not validation.valid
    with pytest.raises(SessionFinished):
        session.step()
    session.back(1)
    assert session.stop_reason is None and session.validation() is None
    session.step()
    assert session.done


def test_the_model_s_end_token_stops_with_eos() -> None:
    # <end> is a stop id of the model that the grammar takes as text: accepted, not terminated.
    grammar = toy_grammar(GrammarKind.REGEX, "a(<end>)?b?")
    session, _ = toy_session(grammar, model=ToyModel(favour={0: VOCAB.index("a"), 1: END}))
    first, second = session.run(5)
    assert second.token_id == END and not second.terminated
    assert session.stop_reason is StopReason.EOS and session.text == "a"


def test_a_refused_token_stops_with_rejected_and_going_back_continues() -> None:
    undisturbed = toy_session(JSON, max_tokens=64, top_k=len(VOCAB))[0].run(12)
    index, victim = next((r.index, r.top[0].token_id) for r in undisturbed if not r.top[0].allowed)
    made: list[Session] = []
    lying = [True]

    def let_through(bitmask: torch.Tensor, step: int) -> None:  # allows what the matcher refuses
        if lying[0] and step == index:
            flip_bit(bitmask, victim)

    made.append(toy_session(JSON, max_tokens=64, top_k=len(VOCAB), after_fill=let_through)[0])
    session = made[0]
    records = session.run(12)
    assert session.stop_reason is StopReason.REJECTED and len(records) == index + 1
    assert records[index].token_id == victim and not records[index].mask_accept_agree
    assert _plain(records[:index]) == _plain(undisturbed[:index])
    # The refused token never entered the matcher: going back rolls it back by nothing.
    session.back(1)
    lying[0] = False
    session.run(12 - index)
    assert _plain(session.steps) == _plain(undisturbed)


# Every method a step calls, of either engine; with whether the real call happens first.
STEP_CALLS = [
    ("active_rules", False),
    ("find_jump_forward_string", False),
    ("fill_next_token_bitmask", True),
    ("distribution", False),
    ("choose", False),
    ("with_token", False),
    ("probe_token", True),
    # before the real call only: the stepper takes a raising accept as "not accepted"
    ("accept_token", False),
    ("is_terminated", False),
    ("extend", True),
]


@pytest.mark.parametrize("index", [0, 4])
@pytest.mark.parametrize(("method", "after_real_call"), STEP_CALLS)
def test_a_step_that_fails_anywhere_leaves_no_trace(
    method: str, after_real_call: bool, index: int
) -> None:
    undisturbed = _plain(toy_session(JSON, max_tokens=64)[0].run(index + 4))
    made: list[Session] = []
    passes: list[ToyForward] = []

    def when() -> bool:
        if method == "distribution":
            # Step k's forward pass runs during step k-1 (overlapped with its checks): fail the
            # pass of step ``index``, which the step then raises.
            return passes[0].forward_passes == index
        return len(made[0].steps) == index

    fault = Fault(method, when=when, after_real_call=after_real_call)
    session, forward = toy_session(JSON, max_tokens=64, fault=fault)
    made.append(session)
    passes.append(forward)
    session.run(index)
    memory = forward.memory_bytes
    with pytest.raises(Injected):
        session.step()
    assert fault.fired and _plain(session.steps) == undisturbed[:index]
    assert forward.memory_bytes == memory and not session.done
    session.run(4)
    assert _plain(session.steps) == undisturbed


def test_the_memory_of_the_step_records_is_counted() -> None:
    session, _ = toy_session(JSON, max_tokens=20)
    assert session.records_bytes == 0
    session.run(5)
    sizes = [s.nbytes() for s in session.steps]
    assert session.records_bytes == sum(sizes)
    assert all(size > len(s.bitmask) > 0 for size, s in zip(sizes, session.steps, strict=True))
    session.back(2)
    assert session.records_bytes == sum(sizes[:3])
    session.step()
    assert session.records_bytes == sum(sizes[:3]) + session.steps[-1].nbytes()


@pytest.mark.parametrize(("max_tokens", "top_k"), [(0, 5), (8, 0), (8, len(VOCAB) + 1)])
def test_limits_out_of_range_are_refused(max_tokens: int, top_k: int) -> None:
    with pytest.raises(InvalidInput):
        toy_session(JSON, max_tokens=max_tokens, top_k=top_k)
