"""Replay: strings and token ids walked through real grammars, no model involved."""

from __future__ import annotations

import pytest

from app.engine import Engine, GrammarKind, GrammarSpec
from app.engine.mask import words_from_bytes
from app.engine.stepper.replay import replay
from app.examples import load_examples
from app.exceptions import InvalidInput, ReplayTooLong

NESTED = GrammarSpec(
    GrammarKind.JSON_SCHEMA, next(e for e in load_examples() if e.id == "nested").source()
)
VALID = (
    '{"user": {"id": 42, "profile": {"display_name": "Ada Lovelace", '
    '"settings": {"theme": "dark", "notifications": false}}}}'
)
PREFIX = '{"user": {"id": 42, "profile": {"display_name": "Ada", "settings": {"theme": '


def test_a_valid_instance_is_accepted_and_complete(engine: Engine) -> None:
    every = range(len(engine.model.tokens.encode(VALID)))
    result = engine.replay(NESTED, text=VALID, bitmask_for=every)
    assert result.accepted and result.complete and result.rejection is None
    assert "".join(t.text for t in result.tokens) == VALID
    assert max(t.depth for t in result.tokens) == 4
    # Each token's state is the one before it: the first at the root, the last inside what it
    # closes.
    assert (result.tokens[0].depth, result.tokens[0].path) == (0, "$")
    assert result.tokens[-1].depth == result.tokens[-1].text.count("}") > 0
    assert "$.user.profile.settings.theme" in {t.path for t in result.tokens}
    for token in result.tokens:
        assert token.bitmask is not None
        words = words_from_bytes(token.bitmask)
        assert (int(words[token.token_id >> 5]) >> (token.token_id & 31)) & 1
        assert token.allowed_count == sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in words)


def test_bitmasks_are_kept_only_for_the_indices_asked(engine: Engine) -> None:
    result = engine.replay(NESTED, text=VALID, bitmask_for=[1, 3, 10_000])
    assert [i for i, t in enumerate(result.tokens) if t.bitmask is not None] == [1, 3]
    assert "bitmask" not in result.tokens[0].to_dict()
    assert len(result.tokens[1].to_dict()["bitmask"]) == 8192  # 49152 bits, base64
    alone = engine.replay(NESTED, text=VALID)
    assert all(t.bitmask is None for t in alone.tokens)
    assert [t.allowed_count for t in alone.tokens] == [t.allowed_count for t in result.tokens]


def test_a_replay_longer_than_the_cap_is_refused_with_the_cap(engine: Engine) -> None:
    ids = engine.model.tokens.encode(VALID)
    cap = engine.settings.replay_token_cap
    assert cap == engine.settings.max_tokens_cap  # the default
    assert len(replay(engine.compile(NESTED), engine.model.tokens, token_ids=ids,
                      max_tokens=len(ids)).tokens) == len(ids)  # fmt: skip
    with pytest.raises(ReplayTooLong) as caught:
        replay(engine.compile(NESTED), engine.model.tokens, text=VALID, max_tokens=len(ids) - 1)
    assert caught.value.message == (
        f"the text is {len(ids)} tokens; a replay walks at most {len(ids) - 1}"
    )
    assert caught.value.pointer == "/text"
    with pytest.raises(ReplayTooLong) as caught:
        engine.replay(NESTED, token_ids=[0] * (cap + 1))
    assert caught.value.message == f"token_ids has {cap + 1} tokens; a replay walks at most {cap}"


def test_a_valid_prefix_is_accepted_but_not_complete(engine: Engine) -> None:
    result = engine.replay(NESTED, text=PREFIX)
    assert result.accepted and not result.complete and result.rejection is None


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("hello", "hello"),
        ('{"usr": 1}', 'r": 1}'),  # '{"us' is a prefix of '{"user"': the 'r' is refused
        ('{"user": {"id": 0}}', "0}}"),  # minimum 1
        (PREFIX + '"blue"}}}}', 'blue"}}}}'),
        (PREFIX + '"dárk"}}}}', 'árk"}}}}'),  # offsets count code points, not bytes
        (VALID + " ", " "),  # nothing may follow the object
        ('{"user": {"id": 42,  "profile"', ' "profile"'),  # one space, not two
    ],
)
def test_the_rejection_offset_is_the_first_refused_character(
    engine: Engine, text: str, refused: str
) -> None:
    result = engine.replay(NESTED, text=text)
    assert not result.accepted and not result.complete
    assert result.rejection is not None
    assert text[result.rejection.offset :] == refused
    assert result.rejection.token_index == len(result.tokens) - 1
    assert not result.tokens[-1].accepted
    assert result.rejection.expected, "a sample of what the grammar accepts there"


def test_expected_lists_what_the_grammar_accepts(engine: Engine) -> None:
    result = engine.replay(NESTED, text=PREFIX + "blue")
    assert result.rejection is not None
    # the text tokenizes as ... '":', ' blue': the grammar wanted ' "' (or ' ' then '"')
    assert result.rejection.token_text == " blue"
    assert result.rejection.expected == (" ", ' "')


def test_token_ids_with_the_stop_token(engine: Engine) -> None:
    tokens = engine.model.tokens
    eos = min(tokens.stop_ids)
    done = engine.replay(NESTED, token_ids=[*tokens.encode(VALID), eos])
    assert done.accepted and done.complete
    early = engine.replay(NESTED, token_ids=[*tokens.encode(PREFIX), eos])
    assert not early.accepted and early.rejection is not None
    assert early.rejection.offset == len(PREFIX)


def test_bad_token_ids_are_named(engine: Engine) -> None:
    with pytest.raises(InvalidInput) as caught:
        engine.replay(NESTED, token_ids=[1, 99999999])
    assert caught.value.message.startswith("token_ids[1] = 99999999 is outside the vocabulary")
    with pytest.raises(InvalidInput):
        engine.replay(NESTED)


def test_an_ebnf_grammar_has_no_json_path(engine: Engine) -> None:
    spec = GrammarSpec(GrammarKind.EBNF, 'root ::= "yes" | "no"')
    result = engine.replay(spec, text="yes")
    assert result.complete and all(t.path == "" for t in result.tokens)
    assert result.tokens[0].rules == ("root",)  # the state the first token was checked in


@pytest.mark.parametrize(
    "text",
    [
        VALID,
        PREFIX,
        PREFIX + '"blue"}}}}',
        '{"user": 5}',
        "",
        "nope",
        VALID + " ",
        '{"user": {"id": 4é',
    ],
)
def test_a_verdict_says_what_a_replay_says(engine: Engine, text: str) -> None:
    grammar = engine.compile(NESTED)
    full = engine.replay(grammar, text=text)
    quick = engine.verdict(grammar, text)
    assert (quick.accepted, quick.complete, quick.rejection) == (
        full.accepted, full.complete, full.rejection,
    )  # fmt: skip
    assert quick.tokens == ()


def test_a_verdict_has_the_replay_cap(engine: Engine) -> None:
    long = '{"user": {"id": 1, "profile": {"display_name": "' + "ab " * 5000
    with pytest.raises(ReplayTooLong) as caught:
        engine.verdict(engine.compile(NESTED), long)
    assert "a replay walks at most" in caught.value.message
