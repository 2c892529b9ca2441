"""Replaying production token ids on the shipped tokenizers (real DeepSeek V4 and Qwen3.6
tokenizers, real xgrammar), under the structural tags xgrammar builds for those models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import xgrammar as xgr

from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec
from app.engine.factories.tokenizer_only import TokenizerModel, open_tokenizer
from app.exceptions import InvalidInput, NoForwardEngine
from app.settings import Settings

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
#: The batch vLLM logged in PR #46272: Qwen3.6's newline, ``</think>``, blank line.
LOGGED = [198, 248069, 271]
DSML = "｜DSML｜"


def _engine(name: str, tmp: Path) -> Engine[TokenizerModel]:
    engine = open_tokenizer(Settings(db_path=tmp / "p.db", compile_workers=1), name)
    assert engine is not None
    return engine


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine[TokenizerModel]]:
    engine = _engine("qwen3.6", tmp_path_factory.mktemp("qwen"))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine[TokenizerModel]]:
    engine = _engine("deepseek-v4", tmp_path_factory.mktemp("deepseek"))
    yield engine
    engine.close()


def tag(model: str, *, reasoning: bool) -> GrammarSpec:
    """xgrammar's own structural tag for ``model``'s tool calls (one tool), as a source."""
    built = xgr.get_model_structural_tag(model, tools=[WEATHER], reasoning=reasoning)
    return GrammarSpec(GrammarKind.STRUCTURAL_TAG, built.model_dump_json(), CompileOptions())


def test_the_shipped_tokenizers_have_the_production_ids(
    qwen: Engine[TokenizerModel], deepseek: Engine[TokenizerModel]
) -> None:
    q, d = qwen.model.tokens, deepseek.model.tokens
    assert (q.text(248069), q.text(248058), d.text(128821), d.text(128822)) == (
        "</think>", "<tool_call>", "<think>", "</think>"
    )  # fmt: skip
    assert (q.vocab_size, d.vocab_size) == (248_320, 129_280)  # the models' padded vocabularies
    assert q.stop_ids == {248044, 248046} and d.stop_ids == {1}


def test_the_logged_qwen_batch_walks_through_a_reasoning_tag(
    qwen: Engine[TokenizerModel],
) -> None:
    """With reasoning, the newline is reasoning text, ``</think>`` ends it, the blank line is the
    tag's constant after it: each state says so."""
    result = qwen.replay(tag("qwen_3_5", reasoning=True), token_ids=LOGGED)
    assert result.accepted and result.refusal is None
    states = [(t.token_id, t.text, t.rules) for t in result.tokens]
    assert states[0][:2] == (198, "\n") and "any_text" in states[0][2]
    assert states[1][:2] == (248069, "</think>") and "any_text" in states[1][2]
    assert states[2][:2] == (271, "\n\n") and states[2][2] == ("const_string",)
    # after </think> only the constant blank line (its few spellings) is allowed
    assert result.tokens[2].allowed_count < 50 < result.tokens[1].allowed_count


def test_the_logged_qwen_batch_is_refused_without_reasoning_and_explained(
    qwen: Engine[TokenizerModel],
) -> None:
    """The grammar never saw the reasoning (the tag has none): ``</think>`` is refused, and the
    refusal names it, the state, the mask's classes and the tag's exclusion."""
    result = qwen.replay(tag("qwen_3_5", reasoning=False), token_ids=LOGGED)
    assert not result.accepted
    refusal = result.refusal
    assert refusal is not None
    assert (refusal.index, refusal.token_id, refusal.token, refusal.special) == (
        1, 248069, "</think>", True
    )  # fmt: skip
    assert refusal.rules == ("triggered_tags",) and refusal.after == "\n"
    assert refusal.allowed.allowed_ids is None and refusal.allowed_tokens is None  # many: classes
    assert refusal.allowed.allowed_count > 200_000
    assert refusal.cause is not None
    assert "'</think>' in its excludes" in refusal.cause
    assert "'<tool_call>\\n<function=' (a trigger that starts a tag)" in refusal.cause


def test_text_then_ids_walk_in_that_order(qwen: Engine[TokenizerModel]) -> None:
    text = "The user wants the weather."
    spec = tag("qwen_3_5", reasoning=True)
    result = qwen.replay(spec, text=text, token_ids=LOGGED)
    text_ids = qwen.model.tokens.encode(text)
    assert [t.token_id for t in result.tokens] == text_ids + LOGGED
    assert result.accepted


def test_an_id_outside_the_vocabulary_names_its_position(qwen: Engine[TokenizerModel]) -> None:
    with pytest.raises(InvalidInput) as refused:
        qwen.replay(tag("qwen_3_5", reasoning=True), token_ids=[198, 248069, 248_320])
    assert refused.value.pointer == "/token_ids/2"
    assert "token_ids[2] = 248320" in refused.value.message


def test_a_padding_id_is_refused_as_the_mask_blocks_it(qwen: Engine[TokenizerModel]) -> None:
    """Ids past the tokenizer but inside the padded vocabulary exist for the model and are
    always masked."""
    result = qwen.replay(tag("qwen_3_5", reasoning=True), token_ids=[198, 248_100])
    assert result.refusal is not None and result.refusal.token_id == 248_100


def deepseek_call(name: str) -> str:
    return (
        f'</think><{DSML}tool_calls>\n<{DSML}invoke name="{name}">\n'
        f'<{DSML}parameter name="city" string="true">Paris</{DSML}parameter>\n'
        f"</{DSML}invoke>\n</{DSML}tool_calls>"
    )


def test_a_deepseek_replay_crosses_the_end_of_reasoning_into_a_tool_call(
    deepseek: Engine[TokenizerModel],
) -> None:
    tokens = deepseek.model.tokens
    ids = tokens.encode(deepseek_call("get_weather"))
    assert ids[0] == 128822  # </think>, an added token that is not special on DeepSeek
    result = deepseek.replay(
        tag("deepseek_v4", reasoning=True), text="The user asks for Paris.", token_ids=ids
    )
    assert result.accepted and result.complete
    at_end = next(i for i, t in enumerate(result.tokens) if t.token_id == 128822)
    assert "any_text" in result.tokens[at_end].rules  # </think> ends the reasoning ...
    assert result.tokens[at_end + 1].rules == ("triggered_tags",)  # ... then free text or a call
    paris = next(t for t in result.tokens if t.text == "Paris")
    assert "xml_string" in paris.rules  # inside the argument's string value
    assert result.tokens[-1].allowed_count == 1  # the call's last '>' is all the tag allows


def test_a_deepseek_call_of_an_unknown_tool_is_explained_in_the_tags_terms(
    deepseek: Engine[TokenizerModel],
) -> None:
    ids = deepseek.model.tokens.encode(deepseek_call("get_time"))
    result = deepseek.replay(tag("deepseek_v4", reasoning=True), text="Hm.", token_ids=ids)
    refusal = result.refusal
    assert refusal is not None and not result.accepted
    assert refusal.token == "_time" and refusal.after.endswith(f'<{DSML}invoke name="get')
    assert refusal.allowed_tokens is not None  # few: listed, in the model's spellings
    assert all("_weather".startswith(t) for t in refusal.allowed_tokens)
    assert refusal.cause is not None
    assert f"after '<{DSML}tool_calls>\\n' (the begin of a tag)" in refusal.cause
    assert f"'<{DSML}invoke name=\"get_weather\">\\n' (the begin of a tag)" in refusal.cause


def test_a_tokenizer_only_model_opens_no_session(deepseek: Engine[TokenizerModel]) -> None:
    with pytest.raises(NoForwardEngine) as refused:
        deepseek.new_session(tag("deepseek_v4", reasoning=True), raw_prompt="Hi")
    assert refused.value.code == "no_forward_engine" and "deepseek-v4" in refused.value.message
