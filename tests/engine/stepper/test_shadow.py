"""The shadow continuation (the model with no mask) and breakpoints, on the real model, and the
shadow's own rules on the toy model."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from app.engine import Engine, GrammarKind, SamplingParams
from app.engine.stepper.breakpoints import DEFAULT_ALARMS, Watch, breakpoint_from
from app.engine.stepper.shadow import shadow
from app.exceptions import InvalidInput
from tests.engine.conftest import nested_session
from tests.engine.toy_forward import ToyModel, toy_grammar, toy_session

TOKENS = 32


def test_a_shadow_from_step_0_is_the_model_s_unconstrained_greedy_generate(
    engine: Engine,
) -> None:
    session = nested_session(engine)
    records = session.run(TOKENS)
    result = shadow(session.model, session.prompt, records, start=0, tokens=TOKENS)
    prompt = list(session.prompt.token_ids)
    greedy = GenerationConfig(max_new_tokens=TOKENS, do_sample=False, eos_token_id=None)
    with torch.inference_mode():
        generated = engine.model.model.generate(
            torch.tensor([prompt]), generation_config=greedy, pad_token_id=0
        )[0, len(prompt) :].tolist()
    ids = [t.token_id for t in result.tokens]
    assert ids == generated[: len(ids)]
    assert len(ids) == TOKENS or ids[-1] in engine.model.tokens.stop_ids
    # They part where the constrained step took another token than the raw favourite.
    parts = next((r.index for r in records if r.token_id != r.top[0].token_id), None)
    assert result.parts_at == parts
    if parts is not None:
        assert result.removed_mass_until == pytest.approx(
            sum(r.blocked_mass for r in records[: parts + 1])
        )


def test_a_shadow_from_a_later_step_continues_the_session_s_prefix(engine: Engine) -> None:
    session = nested_session(engine)
    records = session.run(12)
    result = shadow(session.model, session.prompt, records, start=6, tokens=4)
    # greedy, no mask: its first token is the raw favourite recorded at step 6
    assert result.tokens[0].token_id == records[6].top[0].token_id
    assert result.tokens[0].prob == pytest.approx(records[6].top[0].prob, abs=1e-4)


def test_breakpoints_stop_the_real_model_where_its_records_say(engine: Engine) -> None:
    reference = nested_session(engine).run(60)
    path = next(r.index for r in reference if r.path.startswith("$.user.profile"))
    blocked = next(
        r.index
        for r in reference
        if r.index >= 1 and not r.top[0].allowed and not reference[r.index - 1].top[0].allowed
    )
    specs: list[tuple[dict[str, Any], int]] = [
        ({"when": "path", "value": "$.user.profile*"}, path),
        ({"when": "top1_blocked", "k": 2}, blocked),
    ]
    for spec, expected in specs:
        session = nested_session(engine)
        session.watch = Watch([breakpoint_from(**spec)], defaults=DEFAULT_ALARMS)
        while not session.done and session.watch.hit is None:
            session.step()
        assert session.watch.hit is not None and session.watch.hit.index == expected
        assert len(session.steps) == expected + 1


def test_a_cancelled_shadow_stops_before_its_next_token() -> None:
    grammar = toy_grammar(GrammarKind.REGEX, "[a-c]{30}")
    session, _ = toy_session(grammar, max_tokens=30)
    cancel = threading.Event()
    cancel.set()
    result = shadow(session.model, session.prompt, [], tokens=8, cancel=cancel)
    assert result.cancelled and result.tokens == ()


def test_a_sampled_shadow_draws_as_the_session_does() -> None:
    grammar = toy_grammar(GrammarKind.REGEX, "(.|<eos>|<end>)*")  # the mask allows everything
    sampling = SamplingParams.create(1.0, 1.0, 7)
    session, _ = toy_session(grammar, model=ToyModel(), sampling=sampling, max_tokens=10)
    records = session.run(10)
    result = shadow(session.model, session.prompt, records, tokens=10, sampling=sampling)
    ids = [t.token_id for t in result.tokens]
    assert ids == [r.token_id for r in records][: len(ids)] and result.parts_at is None


def test_a_shadow_from_past_the_steps_is_refused() -> None:
    session, _ = toy_session(toy_grammar(GrammarKind.REGEX, "a+"), max_tokens=4)
    with pytest.raises(InvalidInput, match="from must be between 0 and 0"):
        shadow(session.model, session.prompt, [], start=1)
