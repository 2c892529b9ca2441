"""Compare mode: the other library follows the driver's tokens; where they part is recorded."""

from __future__ import annotations

from app.engine import Engine, GrammarKind, GrammarSpec, MaskingLibrary, StopReason
from app.examples import load_examples

NESTED = next(e for e in load_examples() if e.id == "nested").source()

# The engines are known to differ on JSON's minus zero: xgrammar 0.2.9 writes an integer as
# "-"? ("0" | [1-9][0-9]*) without "-0" (its rule forbids a zero after the minus sign), while
# llguidance 1.7.6 accepts "-0". A bare integer forces no bytes, so the first step's masks agree
# (llguidance's mask leaves out non-canonical spellings of forced text, which would differ at
# step 0 in an object); after "-" they differ by exactly the token "0".
INTEGER = GrammarSpec(
    GrammarKind.JSON_SCHEMA, '{"type": "integer"}', library=MaskingLibrary.LLGUIDANCE
)


def _ids(engine: Engine, text: str) -> list[int]:
    return engine.model.tokens.encode(text)


def test_the_divergence_is_reported_at_the_step_it_happens(engine: Engine) -> None:
    minus, zero = _ids(engine, "-0")
    session = engine.new_session(
        INTEGER, raw_prompt="n =", max_tokens=6, compare=MaskingLibrary.XGRAMMAR
    )
    first = session.force(minus)
    assert first.follower is not None and not first.follower.diverged
    assert first.follower.allowed_count == first.allowed_count
    second = session.force(zero)
    follower = second.follower
    assert follower is not None and follower.engine == "xgrammar"
    assert (follower.only_driver, follower.only_follower, follower.mask_only) == (1, 0, 0)
    assert [(d.token_id, d.driver, d.follower) for d in follower.top_differences] == [
        (zero, True, False)
    ]
    assert follower.ended_at == 1 and follower.refused is not None
    assert "'0'" in follower.refused and "step 1" in follower.refused
    assert session.first_divergence == 1
    # The run goes on under the driver; the follower stays ended, with its reason.
    third = session.step()
    assert session.stop_reason is StopReason.TERMINATED
    assert third.follower is not None and third.follower.ended_at == 1
    assert third.follower.refused == follower.refused and third.follower.allowed_count == 0


def test_going_back_past_the_refusal_revives_the_follower(engine: Engine) -> None:
    minus, zero = _ids(engine, "-0")
    session = engine.new_session(
        INTEGER, raw_prompt="n =", max_tokens=6, compare=MaskingLibrary.XGRAMMAR
    )
    session.force(minus)
    session.force(zero)
    session.back(1)
    assert session.first_divergence is None
    again = session.force(_ids(engine, "7")[0])
    assert again.follower is not None and again.follower.refused is None
    assert again.follower.ended_at is None and again.follower.only_driver == 1  # still "0"
    assert session.step().follower is not None  # it follows on
    assert session.steps[-1].follower.refused is None  # type: ignore[union-attr]


def test_xgrammar_driving_sees_what_llguidance_would_add(engine: Engine) -> None:
    minus = _ids(engine, "-")[0]
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, '{"type": "integer"}')
    session = engine.new_session(
        spec, raw_prompt="n =", max_tokens=6, compare=MaskingLibrary.LLGUIDANCE
    )
    session.force(minus)
    record = session.step()
    assert record.engine == "xgrammar" and record.follower is not None
    assert (record.follower.only_driver, record.follower.only_follower) == (0, 1)
    assert record.follower.refused is None  # whatever xgrammar takes, llguidance takes too
    assert session.first_divergence == 1


def test_replay_reports_both_verdicts(engine: Engine) -> None:
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, '{"type": "integer"}')
    result = engine.replay(spec, text="-0", compare=MaskingLibrary.LLGUIDANCE)
    assert not result.accepted and result.rejection is not None
    assert result.rejection.offset == 1
    assert result.follower is not None and result.follower.engine == "llguidance"
    assert result.follower.accepted and result.follower.complete
    assert result.to_dict()["follower"]["rejection"] is None
    back = engine.replay(INTEGER, text="-0", compare=MaskingLibrary.XGRAMMAR)
    assert back.accepted and back.follower is not None
    assert back.follower.rejection is not None and back.follower.rejection.offset == 1


def test_non_canonical_spellings_are_a_mask_difference_not_a_divergence(engine: Engine) -> None:
    """At the start of an object llguidance's mask keeps only '{"' of the forced text; xgrammar's
    also has "{", which llguidance would still take: mask-only, the step does not diverge."""
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, NESTED, library=MaskingLibrary.LLGUIDANCE)
    session = engine.new_session(spec, raw_prompt="JSON:", max_tokens=2,
                                 compare=MaskingLibrary.XGRAMMAR)  # fmt: skip
    follower = session.step().follower
    assert follower is not None and follower.only_follower >= 1
    assert follower.mask_only == follower.only_follower + follower.only_driver
    assert "{" in [d.text for d in follower.top_differences] and not follower.diverged
