"""Every walk of a matcher is bounded and cancellable (issue 46): ``root ::= root root | "a"``
compiles in milliseconds, yet each token costs more as the text grows. Real xgrammar and
llguidance, the real model's tokenizer and sessions; budgets are CPU seconds, never a timing
assertion."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import xgrammar as xgr

from app.engine import Engine, GrammarKind, GrammarSpec, MaskingLibrary
from app.engine.budget import WalkBudget, checkpoint, walk_budget
from app.engine.grammars.reasoning import ReasoningGate, ReasoningMode
from app.engine.masking import new_masking
from app.engine.masking.xgrammar import JUMP_FORWARD_CAP
from app.engine.stepper.replay import replay, verdict
from app.engine.stepper.segments import SegmentTracker
from app.exceptions import GrammarTooSlow, RequestEnded

HOSTILE = 'root ::= root root | "a"'
LIBRARIES = [MaskingLibrary.XGRAMMAR, MaskingLibrary.LLGUIDANCE]


def hostile(engine: Engine, library: MaskingLibrary) -> Any:
    return engine.compile(GrammarSpec(GrammarKind.EBNF, HOSTILE, library=library))


def test_a_checkpoint_outside_any_budget_does_nothing() -> None:
    checkpoint(5, total=10)  # no budget in force: a walk outside a request is not bounded


def test_a_spent_budget_stops_the_walk_naming_how_far_it_got() -> None:
    with pytest.raises(GrammarTooSlow) as caught, walk_budget(0.01, what="the walk") as budget:
        index = 0
        while True:  # CPU work between checkpoints, as a matcher call does
            checkpoint(index, total=1_000_000, chars=index * 4)
            sum(range(20_000))
            index += 1
    assert budget.spent_s > 0.01
    message = caught.value.message
    assert f"after {index} of 1000000 tokens walked ({index * 4} characters)" in message
    assert "budget of 0.01 s (MASKSCOPE_WALK_BUDGET_S)" in message
    assert "ms a token" in message
    assert caught.value.code == "grammar_too_slow"


def test_a_cancelled_budget_stops_at_the_next_checkpoint() -> None:
    left = threading.Event()
    with walk_budget(None, cancelled=left) as budget:
        checkpoint(0)
        left.set()
        with pytest.raises(RequestEnded, match="the client left: the walk was stopped after 1"):
            checkpoint(1)
    assert budget.cancelled.is_set()


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.value)
def test_a_hostile_replay_stops_at_the_budget(engine: Engine, library: MaskingLibrary) -> None:
    grammar = hostile(engine, library)
    text = "a" * 4000  # days of CPU unbounded: a few hundred characters already take minutes
    total = len(engine.model.tokens.encode(text))
    with pytest.raises(GrammarTooSlow) as caught, walk_budget(0.3, what="the replay") as budget:
        replay(grammar, engine.model.tokens, text=text)
    assert 0 < budget.done < total
    expected = (
        "the replay ran past its CPU-time budget of 0.3 s (MASKSCOPE_WALK_BUDGET_S) after "
        f"{budget.done} of {total} tokens walked ({budget.chars} characters)"
    )
    assert expected in caught.value.message
    # The verdict walk (schema tests) is bounded the same way.
    with pytest.raises(GrammarTooSlow), walk_budget(0.3):
        verdict(grammar, engine.model.tokens, text=text)


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.value)
def test_a_cancelled_replay_stops_at_its_next_token(
    engine: Engine, library: MaskingLibrary
) -> None:
    grammar = hostile(engine, library)
    budget = WalkBudget(None, what="the replay")  # no CPU limit: only the flag stops it
    outcome: list[BaseException] = []

    def walk() -> None:
        with budget.running():
            try:
                replay(grammar, engine.model.tokens, text="a" * 4000)
            except BaseException as error:  # noqa: BLE001 - the test reads it
                outcome.append(error)

    thread = threading.Thread(target=walk)
    thread.start()
    while budget.done < 20 and thread.is_alive():  # walking, well past its start
        thread.join(0.01)
    budget.cancel()
    thread.join(120)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RequestEnded)
    assert "the client left: the replay was stopped after" in outcome[0].message
    assert 20 <= budget.done < 1000


def _big_tag(tools: int) -> dict[str, Any]:
    """A tag of ``tools`` functions, as a serving stack builds it (tens of KB)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    listed = [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": schema}}
        for i in range(tools)
    ]
    tag = xgr.get_model_structural_tag("qwen_3", tools=listed, tool_choice="auto")
    out: dict[str, Any] = json.loads(tag.model_dump_json())
    return out


def test_segments_under_a_large_tag_stop_at_the_budget() -> None:
    tag = _big_tag(300)
    assert len(json.dumps(tag)) > 25_000
    call = '<tool_call>\n{"name": "tool_299", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    text = ("</think>\n\n" + call * 40).encode()  # the tag's (empty) reasoning block first
    tracker = SegmentTracker(tag)
    gate = ReasoningGate(ReasoningMode.NONE)
    with pytest.raises(GrammarTooSlow) as caught, walk_budget(0.2, what="the segments"):
        for end in range(0, len(text), 4):  # the segment at every token, as a replay asks
            checkpoint(end, total=len(text), unit="bytes walked")
            tracker.at(text[:end], gate)
    assert "the segments ran past its CPU-time budget of 0.2 s" in caught.value.message
    assert str(caught.traceback[-1].path).endswith("budget.py")
    assert any(str(entry.path).endswith("segments.py") for entry in caught.traceback)


def test_a_session_step_past_its_budget_fails_whole(engine: Engine) -> None:
    spec = GrammarSpec(GrammarKind.EBNF, 'root ::= s "b"\ns ::= s s | "a"')
    session = engine.new_session(spec, raw_prompt="a" * 200, max_tokens=2000)
    aaaa = engine.model.tokens.encode("aaaa")
    assert len(aaaa) == 1
    with pytest.raises(GrammarTooSlow) as caught:
        for _ in range(2000):
            with walk_budget(0.05, what="this step of the session"):
                session.force(aaaa[0])
    taken = len(session.steps)
    expected = (
        "this step of the session ran past its CPU-time budget of 0.05 s "
        f"(MASKSCOPE_WALK_BUDGET_S) after {taken} tokens of output:"
    )
    assert expected in caught.value.message
    # The step was a transaction: the session is as it was before it, and still usable.
    assert session.text == "aaaa" * taken and not session.done
    session.back(taken - 1)
    record = session.force(aaaa[0])  # cheap again near the start, with no budget at all
    assert record.index == 1 and session.text == "aaaaaaaa"


def test_an_endless_forced_text_gives_a_cut_jump_forward(engine: Engine) -> None:
    # xgrammar's own search never returns here, its memory growing by hundreds of MB a second.
    endless = engine.compile(GrammarSpec(GrammarKind.EBNF, 'root ::= "a" root'))
    masking = new_masking(endless)
    assert masking.find_jump_forward_string() == "a" * JUMP_FORWARD_CAP
    session = engine.new_session(endless, raw_prompt="a", max_tokens=3)
    records = session.run(3)
    assert [r.jump_forward for r in records] == ["a" * JUMP_FORWARD_CAP] * 3
    assert session.text == "".join(r.token_text for r in records) and set(session.text) == {"a"}


def test_a_short_forced_text_is_xgrammars_own(engine: Engine) -> None:
    grammar = engine.compile(GrammarSpec(GrammarKind.EBNF, 'root ::= "abc" ("x" | "y")'))
    masking = new_masking(grammar)
    assert masking.find_jump_forward_string() == "abc"
    assert masking.accept_token(engine.model.tokens.encode("a")[0])
    assert masking.find_jump_forward_string() == "bc"
