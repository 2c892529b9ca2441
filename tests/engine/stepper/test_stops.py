"""The end of generation as vLLM decides it: ``min_tokens`` against a schema that has ended,
stop ids and stop strings, and the stop-token set (real Qwen3.6 tokenizer, the real local
model's tokenizer, real xgrammar)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np
import pytest
import xgrammar as xgr

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, Session, StopReason
from app.engine.factories.tokenizer_only import TokenizerModel
from app.engine.stepper.stops import EMPTY_MASK, EndRules
from app.exceptions import InvalidInput
from tests.engine.shipped import qwen_engine

#: A schema whose document is short and then over: after `"yes"` only a stop may follow.
TERMINAL = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps({"enum": ["yes"]}))
TEXT = '"yes"'


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine[TokenizerModel]]:
    with qwen_engine(tmp_path_factory.mktemp("qwen")) as engine:
        yield engine


def _first_only_stop(engine: Engine, text: str) -> int:
    """The first step at which the grammar allows nothing but a stop, found here with a bare
    xgrammar matcher (step i is the state after i tokens)."""
    tokens = engine.model.tokens
    matcher = xgr.GrammarMatcher(engine.compile(TERMINAL).compiled)
    bitmask = xgr.allocate_token_bitmask(1, tokens.vocab_size)
    for step, token_id in enumerate([*tokens.encode(text), None]):
        matcher.fill_next_token_bitmask(bitmask)
        bits = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")
        allowed = set(np.flatnonzero(bits[: tokens.vocab_size]).tolist())
        if allowed <= set(tokens.stop_ids):
            return step
        assert token_id is not None and matcher.accept_token(token_id)
    raise AssertionError("the text never reaches a state with only a stop allowed")


@pytest.mark.parametrize("which", ["qwen", pytest.param("engine", marks=pytest.mark.model)])
def test_min_tokens_past_a_terminal_schema_empties_the_mask_where_only_a_stop_is_left(
    which: str, request: pytest.FixtureRequest
) -> None:
    engine: Engine = request.getfixturevalue(which)
    step = _first_only_stop(engine, TEXT)
    ids = engine.model.tokens.encode(TEXT)
    result = engine.replay(TERMINAL, token_ids=ids, end_rules=EndRules(min_tokens=step + 5))
    assert result.end is not None
    flagged = result.end["empty_masks"]
    assert [e["step"] for e in flagged] == [step]  # nothing before: every earlier step had text
    assert flagged[0]["flag"] == EMPTY_MASK
    assert set(flagged[0]["stops_removed"]) == set(engine.model.tokens.stop_ids)
    assert result.end["can_end_at"] == step
    # min_tokens at most the text's length: nothing is emptied
    within = engine.replay(TERMINAL, token_ids=ids, end_rules=EndRules(min_tokens=step))
    assert within.end is not None and within.end["empty_masks"] == []


def test_the_shipped_stop_ids_stand_in_for_a_generation_config(
    qwen: Engine[TokenizerModel],
) -> None:
    tokens = qwen.model.tokens
    im_end = tokens.tokenizer.convert_tokens_to_ids("<|im_end|>")
    extra = tokens.encode("\n")[0]
    rules = EndRules(stop_token_ids=(extra,))
    end = qwen.replay(TERMINAL, text=TEXT, end_rules=rules).end
    assert end is not None
    stops = end["stops"]
    assert stops["tokenizer_eos"] == im_end
    assert "no generation config" in stops["source"]
    assert set(stops["generation_eos"]) == set(tokens.stop_ids)
    # vLLM's all_stop_token_ids: the EOS, the config's list and the request's ids
    assert set(stops["to_xgrammar"]) == {im_end, *tokens.stop_ids, extra}
    assert end["unallowed_end"] is None  # the compiled grammar ends on the model's own ids
    assert set(end["allowed_at_end"]) == set(tokens.stop_ids)


def test_a_stop_string_cuts_the_text_after_min_tokens(engine: Engine) -> None:
    schema = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps({"type": "string"}))
    text = '"one two one"'
    ids = engine.model.tokens.encode(text)
    end = engine.replay(schema, token_ids=ids, end_rules=EndRules(stop=("one",))).end
    assert end is not None and end["stopped"]["by"] == "stop"
    assert end["stopped"]["text_end"] == text.find("one")
    # the detokenizer looks for it only after the first min_tokens tokens
    late = engine.replay(
        schema, token_ids=ids, end_rules=EndRules(min_tokens=len(ids) - 2, stop=("one",))
    ).end
    assert late is not None and late["stopped"]["text_end"] == text.rfind("one")


def test_a_stop_id_outside_the_vocabulary_names_its_place(engine: Engine) -> None:
    with pytest.raises(InvalidInput) as caught:
        engine.replay(TERMINAL, text=TEXT, end_rules=EndRules(stop_token_ids=(1, 10**9)))
    assert caught.value.pointer == "/stop_token_ids/1"


def test_an_end_token_the_compiled_grammar_does_not_stop_on_is_a_finding(
    qwen: Engine[TokenizerModel],
) -> None:
    # #52153: the grammar was compiled on a tokenizer info without the generation config's EOS
    # list; the model's `<|endoftext|>` is then refused where the grammar can end
    tokens = qwen.model.tokens
    im_end = tokens.tokenizer.convert_tokens_to_ids("<|im_end|>")
    compiled = qwen.compile(TERMINAL)
    info = xgr.TokenizerInfo.from_huggingface(
        tokens.tokenizer, vocab_size=tokens.vocab_size, stop_token_ids=[im_end]
    )
    narrow = xgr.GrammarCompiler(info).compile_json_schema(TERMINAL.source)
    grammar = dataclasses.replace(compiled, compiled=narrow)
    end = qwen.replay(grammar, text=TEXT, end_rules=EndRules(min_tokens=1)).end
    assert end is not None and end["unallowed_end"] is not None
    endoftext = tokens.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert end["unallowed_end"]["missing"] == [endoftext]
    assert "#51693" in end["unallowed_end"]["message"]


def _session(engine: Engine, rules: EndRules | None, max_tokens: int = 24) -> Session:
    return engine.new_session(
        TERMINAL,
        messages=[ChatMessage("user", "Answer yes.")],
        max_tokens=max_tokens,
        end_rules=rules,
    )


def test_a_session_flags_the_empty_mask_where_only_a_stop_is_left(engine: Engine) -> None:
    free = _session(engine, None)
    free.run(24)
    text = free.text
    step = _first_only_stop(engine, text)
    assert [s.token_id for s in free.steps][:step] == engine.model.tokens.encode(text)[:step]
    session = _session(engine, EndRules(min_tokens=step + 5))
    session.run(24)
    report = session.end_report()
    assert report is not None
    assert [e.step for e in report.empty_masks] == [step]
    assert report.empty_masks[0].flag == EMPTY_MASK
    # vLLM 0.32.0 puts the stops back on an all -inf structured row: the request ends there
    assert session.stop_reason is StopReason.TERMINATED and len(session.steps) == step + 1
    assert free.end_report() is None  # no rules, no report


def test_a_request_stop_id_ends_a_session_as_vllm_s_stop_checker_does(engine: Engine) -> None:
    free = _session(engine, None)
    free.run(24)
    second = free.steps[1].token_id
    session = _session(engine, EndRules(stop_token_ids=(second,)))
    session.run(24)
    assert session.stop_reason is StopReason.STOP and len(session.steps) == 2
