"""A trace rebuilt with its recorded tokens' forward passes in one (issue 45, item 3): the session
holds the records and the state a step-by-step rebuild holds, and continues the same (real
default model, real xgrammar)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, Session, StepRecord
from app.engine.model.sampling import SamplingParams
from app.engine.stepper.rebuild import rebuild, trace_steps

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 200}, "age": {"type": "integer"}},
    "required": ["story", "age"],
})  # fmt: skip
MESSAGES = [ChatMessage("user", "Tell a short story as JSON.")]
#: what a float of a record may differ by between one pass's row and a pass of its own
TOLERANCE = 1e-4
#: the fields compared within TOLERANCE; every other one (timings aside) must be equal
_FLOATS = {"prob", "blocked_mass"}


def _session(engine: Engine, sampling: SamplingParams | None = None) -> Session:
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, SCHEMA)
    return engine.new_session(spec, messages=MESSAGES, max_tokens=40, sampling=sampling)


def _recorded(
    engine: Engine, actions: list[dict[str, Any]], sampling: SamplingParams | None
) -> list[int]:
    """A session that took ``actions`` step by step: its tokens, as a permalink records them."""
    session = _session(engine, sampling)
    rebuild(session, actions, batched=False)
    return [s.token_id for s in session.steps]


def _assert_same(fast: StepRecord, slow: StepRecord) -> None:
    one, other = fast.without_timings(), slow.without_timings()
    for key in _FLOATS:
        assert one.pop(key) == pytest.approx(other.pop(key), abs=TOLERANCE), key
    top_one, top_other = one.pop("top"), other.pop("top")
    assert [t["token_id"] for t in top_one] == [t["token_id"] for t in top_other]
    for a, b in zip(top_one, top_other, strict=True):
        assert a["logit"] == pytest.approx(b["logit"], abs=TOLERANCE)
        assert a["prob"] == pytest.approx(b["prob"], abs=TOLERANCE)
    allowed_one, allowed_other = one.pop("allowed_tokens"), other.pop("allowed_tokens")
    assert [t["token_id"] for t in allowed_one] == [t["token_id"] for t in allowed_other]
    assert one == other


def _both(
    engine: Engine,
    actions: list[dict[str, Any]],
    tokens: list[int],
    sampling: SamplingParams | None = None,
) -> tuple[Session, Session, int]:
    """The trace rebuilt with ``tokens`` fed ahead, and step by step; the step batches the
    first one ran."""
    batcher = engine.model.batcher
    fast = _session(engine, sampling)
    before = batcher.counts.batches
    rebuild(fast, actions, tokens=tokens)
    batches = batcher.counts.batches - before
    slow = _session(engine, sampling)
    rebuild(slow, actions, batched=False)
    return fast, slow, batches


def _assert_continues_the_same(fast: Session, slow: Session) -> None:
    assert len(fast.steps) == len(slow.steps) and fast.stop_reason == slow.stop_reason
    for a, b in zip(fast.steps, slow.steps, strict=True):
        _assert_same(a, b)
    # The next steps: the first from the pass's last row, the next from the cache it built.
    for _ in range(3):
        if slow.done:
            break
        _assert_same(fast.step(), slow.step())


ACTIONS: list[dict[str, Any]] = [
    {"op": "step", "n": 10},
    {"op": "force", "token_id": None},
    {"op": "step", "n": 9},
]


def _actions(engine: Engine) -> list[dict[str, Any]]:
    """Ten steps, a forced space (in the story's string by then), nine steps."""
    space = engine.model.tokens.encode(" ")[0]
    return [{**a, "token_id": space} if a["op"] == "force" else a for a in ACTIONS]


def test_a_rebuild_with_its_tokens_holds_what_a_step_by_step_rebuild_holds(
    engine: Engine,
) -> None:
    actions = _actions(engine)
    tokens = _recorded(engine, actions, None)
    assert len(tokens) == trace_steps(actions) == 20
    fast, slow, batches = _both(engine, actions, tokens)
    assert batches == 0  # no forward pass a step
    assert [s.token_id for s in fast.steps] == tokens
    _assert_continues_the_same(fast, slow)


def test_a_sampled_trace_rebuilds_the_same(engine: Engine) -> None:
    sampling = SamplingParams.create(0.9, 0.95, 7)
    actions = [{"op": "step", "n": 16}]
    tokens = _recorded(engine, actions, sampling)
    fast, slow, batches = _both(engine, actions, tokens, sampling)
    assert batches == 0
    _assert_continues_the_same(fast, slow)


def test_a_step_that_takes_another_token_than_recorded_runs_on_step_by_step(
    engine: Engine,
) -> None:
    actions = [{"op": "step", "n": 14}]
    tokens = _recorded(engine, actions, None)
    wrong = tokens[:6] + [tokens[6] + 1] + tokens[7:]  # never what step 6 chooses (greedy)
    fast, slow, batches = _both(engine, actions, wrong)
    assert [s.token_id for s in fast.steps] == tokens
    assert batches >= 7  # from step 7 on, a pass a step
    _assert_continues_the_same(fast, slow)


@pytest.mark.parametrize(
    "tokens",
    [
        pytest.param(lambda t: t[:-1], id="one short"),
        pytest.param(lambda t: [t[0] + 1, *t[1:]], id="a forced token not the recorded one"),
    ],
)
def test_tokens_that_are_not_the_trace_s_are_not_fed(engine: Engine, tokens: Any) -> None:
    actions = [{"op": "force", "token_id": engine.model.tokens.encode("{")[0]},
               {"op": "step", "n": 5}]  # fmt: skip
    recorded = _recorded(engine, actions, None)
    fast, slow, batches = _both(engine, actions, tokens(recorded))
    assert batches >= 5
    _assert_continues_the_same(fast, slow)


def test_progress_is_told_before_the_first_step_and_after_each(engine: Engine) -> None:
    told: list[tuple[int, int]] = []
    session = _session(engine)
    rebuild(session, [{"op": "step", "n": 4}], progress=lambda d, t: told.append((d, t)))
    assert told == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
