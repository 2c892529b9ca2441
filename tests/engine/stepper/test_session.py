"""The stepper on the real model and real xgrammar: what the model adds (its chat template, its
vocabulary, its KV cache going back and forth). The stepper's own rules (force, max_tokens, the
records' memory...) are tested on the toy forward engine in ``test_stepper.py``."""

from __future__ import annotations

import json

import pytest

from app.engine import (
    Engine,
    GrammarKind,
    GrammarSpec,
    SamplingParams,
    Session,
    StepRecord,
    StopReason,
)
from app.engine.mask import words_from_bytes
from app.exceptions import InvalidInput
from tests.engine.conftest import NESTED, mask_bit, nested_session


def _popcount(record: StepRecord) -> int:
    return sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in words_from_bytes(record.bitmask))


@pytest.fixture(scope="module")
def finished(engine: Engine) -> Session:
    session = nested_session(engine)
    session.run(NESTED.max_tokens)
    return session


def test_the_session_terminates_with_valid_json(finished: Session) -> None:
    assert finished.stop_reason is StopReason.TERMINATED
    last = finished.steps[-1]
    assert last.terminated and last.token_id in finished.model.tokens.stop_ids
    assert "<|im_end|>" not in finished.text
    data = json.loads(finished.text)
    assert isinstance(data["user"]["profile"]["settings"]["theme"], str)
    validation = finished.validation()
    assert validation is not None and validation.valid


def test_every_chosen_token_is_allowed_in_its_bitmask(finished: Session) -> None:
    vocab_size = finished.model.tokens.vocab_size
    for record in finished.steps:
        assert record.vocab_size == vocab_size == 49152
        assert len(record.bitmask) == (vocab_size + 31) // 32 * 4
        assert mask_bit(record, record.token_id), record.index
        assert record.allowed_count == _popcount(record)
        assert record.mask_accept_agree


def test_the_raw_distribution_figures_agree(finished: Session) -> None:
    for record in finished.steps:
        probs = [t.prob for t in record.top]
        assert probs == sorted(probs, reverse=True) and len(record.top) == 10
        for candidate in record.top:
            assert candidate.allowed == mask_bit(record, candidate.token_id)
        blocked_in_top = sum(t.prob for t in record.top if not t.allowed)
        assert blocked_in_top - 1e-6 <= record.blocked_mass <= 1.0 + 1e-6
        if record.token_id in [t.token_id for t in record.top]:
            assert record.rank == [t.token_id for t in record.top].index(record.token_id)
            assert record.prob == pytest.approx(record.top[record.rank].prob)
        else:
            assert record.rank >= len(record.top)
        # greedy: the chosen token is the most probable allowed one
        allowed_top = [t for t in record.top if t.allowed]
        if allowed_top:
            assert record.token_id == allowed_top[0].token_id


def test_depth_and_path_follow_the_nesting(finished: Session) -> None:
    assert max(r.depth for r in finished.steps) == 4
    paths = {r.path for r in finished.steps}
    assert "$.user.profile.settings.theme" in paths
    assert finished.steps[-1].depth == 0
    theme = next(r for r in finished.steps if r.path == "$.user.profile.settings.theme")
    assert theme.rules, "the Earley parser names at least one active rule"


def test_back_then_forward_reproduces_the_records(engine: Engine) -> None:
    session = nested_session(engine)
    original = [r.without_timings() for r in session.run(20)]
    session.back(8)
    assert len(session.steps) == 12
    session.run(8)
    assert [r.without_timings() for r in session.steps] == original
    session.back(100)  # back to the prompt: the prefill runs again
    assert session.steps == [] and session.text == ""
    session.run(20)
    assert [r.without_timings() for r in session.steps] == original


def test_back_then_forward_reproduces_seeded_sampling(engine: Engine) -> None:
    sampling = SamplingParams(temperature=1.3, top_p=0.95, seed=1234)
    session = nested_session(engine, sampling=sampling)
    original = [r.without_timings() for r in session.run(25)]
    session.back(25)
    session.run(10)
    session.back(3)
    session.run(18)
    assert [r.without_timings() for r in session.steps] == original
    greedy = [r.without_timings() for r in nested_session(engine).run(25)]
    assert original != greedy, "temperature 1.3 should leave the greedy path somewhere"


def test_a_regex_grammar_on_a_raw_prompt(engine: Engine) -> None:
    session = engine.new_session(
        GrammarSpec(GrammarKind.REGEX, "[0-9]{3}-[0-9]{4}"),
        raw_prompt="Call me at 555-",
        max_tokens=20,
    )
    session.run(20)
    assert session.stop_reason is StopReason.TERMINATED
    assert len(session.text) == 8 and session.text[3] == "-"
    assert all(r.path == "" and r.depth == 0 for r in session.steps)
    validation = session.validation()
    assert validation is not None and validation.valid


def test_max_tokens_above_the_cap_is_refused(engine: Engine) -> None:
    with pytest.raises(InvalidInput):
        nested_session(engine, max_tokens=engine.settings.max_tokens_cap + 1)


def test_a_small_allowed_set_is_recorded_whole_with_its_probabilities(engine: Engine) -> None:
    session = engine.new_session(
        GrammarSpec(GrammarKind.REGEX, "[ab]"), raw_prompt="Pick a letter: ", max_tokens=2
    )
    record = session.step()
    assert record.allowed_count == 2
    listed = record.allowed_tokens
    assert sorted(t.text for t in listed) == ["a", "b"]
    assert [t.prob for t in listed] == sorted((t.prob for t in listed), reverse=True)
    assert record.token_id in {t.token_id for t in listed}
    assert sum(t.prob for t in listed) == pytest.approx(1 - record.blocked_mass, abs=1e-4)
    assert record.to_dict()["allowed_tokens"][0]["allowed"] is True


def test_a_large_allowed_set_is_not_listed(finished: Session) -> None:
    assert all((r.allowed_tokens == ()) == (r.allowed_count > 100) for r in finished.steps)
