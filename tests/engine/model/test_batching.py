"""Concurrent sessions on the real model share forward passes (``forward/batch.py``), and each
records what it records alone: the same masks and tokens, logits within float error (a token
may differ only where the two best allowed tokens are within ``MARGIN`` of each other)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from app.engine import (
    ChatMessage,
    Engine,
    GrammarKind,
    GrammarSpec,
    Session,
    StepRecord,
    with_schema,
)
from app.examples import load_examples

LOGIT_TOLERANCE = 1e-3  # float32 batched vs single-row matrix products differ by ~1e-4
MARGIN = 1e-2  # where the two best allowed logits are closer, a token may differ
EXAMPLES = ("router", "candidate", "risk", "nested")


@dataclass
class Script:
    """Steps, a back, a forced token (the second-best allowed one), steps again."""

    example: str
    first: int
    back: int
    after: int
    records: list[StepRecord] = field(default_factory=list)


def _session(engine: Engine, example_id: str) -> Session:
    example = next(e for e in load_examples() if e.id == example_id)
    source = example.source()
    system = with_schema(example.system, source) if example.schema_in_prompt else example.system
    return engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, source),
        messages=[ChatMessage("system", system), ChatMessage("user", example.prompt)],
        max_tokens=example.max_tokens,
    )


def _second_allowed(record: StepRecord) -> int:
    allowed = [t.token_id for t in record.top if t.allowed and t.token_id != record.token_id]
    return allowed[0] if allowed else record.token_id


def _play(session: Session, script: Script) -> list[StepRecord]:
    """The script on ``session`` (its prompt already consumed by one step)."""
    session.run(script.first)
    replaced = session.steps[-script.back]
    session.back(script.back)
    session.force(_second_allowed(replaced))
    session.run(script.after)
    return list(session.steps)


def _scripts() -> list[Script]:
    return [
        Script(example, first=3 + i, back=1 + i % 3, after=4 - i % 2)
        for i, example in enumerate(EXAMPLES)
    ]


def _margin(record: StepRecord) -> float:
    logits = sorted((t.logit or 0.0 for t in record.top if t.allowed), reverse=True)
    return logits[0] - logits[1] if len(logits) > 1 else float("inf")


def _compare(alone: list[StepRecord], batched: list[StepRecord]) -> int:
    """How many steps agree; fails where they disagree by more than float error."""
    for index, (one, other) in enumerate(zip(alone, batched, strict=True)):
        assert other.bitmask == one.bitmask and other.forced == one.forced, index
        assert [t.token_id for t in other.top[:3]] == [t.token_id for t in one.top[:3]], index
        for mine, theirs in zip(one.top, other.top, strict=False):
            if mine.token_id == theirs.token_id:
                assert theirs.logit == pytest.approx(mine.logit, abs=LOGIT_TOLERANCE), index
                assert theirs.prob == pytest.approx(mine.prob, abs=LOGIT_TOLERANCE), index
        if other.token_id != one.token_id:
            assert _margin(one) < MARGIN, f"step {index}: a token differs with a clear margin"
            return index  # the prefixes differ from here on
    return len(alone)


def test_concurrent_sessions_share_forward_passes_and_record_what_they_record_alone(
    engine: Engine,
) -> None:
    batcher = engine.model.batcher
    assert batcher.batches_rows
    scripts = _scripts()
    alone = []
    for script in scripts:  # one at a time: every step a batch of one, the ordinary path
        session = _session(engine, script.example)
        session.step()
        alone.append(_play(session, script))
    sessions = [_session(engine, script.example) for script in scripts]
    for session in sessions:
        session.step()  # the prompts, each alone
    before = (batcher.counts.batches, batcher.counts.rows)
    errors: list[BaseException] = []

    def play(session: Session, script: Script) -> None:
        try:
            script.records = _play(session, script)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    pairs = zip(sessions, scripts, strict=True)
    threads = [threading.Thread(target=play, args=pair) for pair in pairs]
    with engine.model.lock:  # every session's first step waits: they must share a batch
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while batcher.waiting < len(threads) - 1:
            assert time.monotonic() < deadline, "the sessions did not all wait for the model"
            time.sleep(0.01)
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    batches = batcher.counts.batches - before[0]
    rows = batcher.counts.rows - before[1]
    assert rows > batches, "the concurrent steps shared forward passes"
    assert batcher.counts.largest >= len(threads) - 1
    agreed = [_compare(a, s.records) for a, s in zip(alone, scripts, strict=True)]
    lengths = [len(a) for a in alone]
    assert sum(agreed) >= sum(lengths) - 2 * len(lengths), (agreed, lengths)
    print(f"{rows} rows in {batches} forward passes; steps agreeing {agreed} of {lengths}")
