"""What a step record says about its own token (issue 45 C3, issue 42): the token that straddles
the reasoning's end marker, with the bytes on each side, and the step ``min_tokens`` empties
(real default model, real xgrammar)."""

from __future__ import annotations

import json

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, Session
from app.engine.grammars.reasoning import ReasoningMode
from app.engine.records import Straddle
from app.engine.stepper.stops import EndRules

PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
# a free reasoning block closed by </think>, then a tag opened by "</": the straddling "></"
# ends the marker with ">" and opens the tag with "</"
FREE_AFTER = json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": [
    {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"},
    {"type": "tag", "begin": "</", "content": {"type": "any_text"}, "end": "!"}]}})  # fmt: skip
TERMINAL = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps({"enum": ["yes"]}))


def _force_text(session: Session, text: str) -> None:
    for token_id in session.model.tokens.encode(text):
        session.force(token_id)


def test_the_straddling_token_records_which_bytes_the_grammar_was_fed(engine: Engine) -> None:
    tokens = engine.model.tokens
    straddle = tokens.encode("></")
    assert len(straddle) == 1, "the default model has a single ></ token"
    session = engine.new_session(
        GrammarSpec(GrammarKind.STRUCTURAL_TAG, FREE_AFTER),
        raw_prompt=PROMPT,
        reasoning=ReasoningMode.MASK_AFTER_END,
    )
    _force_text(session, "ok </think")
    record = session.force(straddle[0])
    assert record.straddle == Straddle("reasoning_end", "</think>", ">", "</")
    assert record.to_dict()["straddle"] == {
        "boundary": "reasoning_end", "marker": "</think>", "before": ">", "after": "</"
    }  # fmt: skip
    assert all(s.straddle is None for s in session.steps[:-1])
    assert session.step().straddle is None  # masked from here: nothing straddles


def test_a_token_that_ends_the_marker_exactly_does_not_straddle(engine: Engine) -> None:
    session = engine.new_session(
        GrammarSpec(GrammarKind.STRUCTURAL_TAG, FREE_AFTER),
        raw_prompt=PROMPT,
        reasoning=ReasoningMode.MASK_AFTER_END,
    )
    _force_text(session, "ok </think>")
    assert all(s.straddle is None for s in session.steps)
    assert session.steps[-1].to_dict()["straddle"] is None


def _terminal(engine: Engine, rules: EndRules | None) -> Session:
    return engine.new_session(
        TERMINAL,
        messages=[ChatMessage("user", "Say yes.")],
        max_tokens=24,
        end_rules=rules,
    )


def test_the_step_min_tokens_empties_is_flagged_on_its_record(engine: Engine) -> None:
    free = _terminal(engine, None)
    free.run(24)
    assert not any(s.emptied_by_processors or s.empty_mask for s in free.steps)
    session = _terminal(engine, EndRules(min_tokens=len(free.steps) + 5))
    session.run(24)
    report = session.end_report()
    assert report is not None and report.empty_masks
    flagged = [s.index for s in session.steps if s.emptied_by_processors]
    assert flagged == [e.step for e in report.empty_masks]
    assert session.steps[flagged[0]].to_dict()["emptied_by_processors"] is True
