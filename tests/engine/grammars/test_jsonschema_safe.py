"""The validator factory: patterns on RE2 (linear time, ECMA-262 meaning), what RE2 cannot run
is a finding, and nothing is retrieved. Real jsonschema, real RE2."""

from __future__ import annotations

from typing import Any

import pytest
import referencing.exceptions

from app.doctor.judge import Judge
from app.engine.grammars.ecma_regex import ecma_to_re2
from app.engine.grammars.jsonschema_safe import REGISTRY, error_list, schema_validator
from app.engine.grammars.spec import GrammarKind, GrammarSpec
from app.engine.grammars.validation import validate_output
from tests.listener import Listener

# 40 a's: Python's re would take hours on "^(a+)+$" (each a doubles the time; 28 took 20 s), so
# a verdict coming back at all shows the engine is linear.
HOSTILE = "a" * 40 + "!"


def _messages(schema: Any, instance: Any) -> list[str]:
    return [e.message for e in error_list(schema_validator(schema), instance)]


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"pattern": "^(a+)+$"}, HOSTILE),
        ({"pattern": "^(a|a)*$"}, HOSTILE),
        ({"pattern": "^(a|aa)+$"}, HOSTILE),
        ({"patternProperties": {"^(a+)+$": {"type": "integer"}}}, {HOSTILE: 1}),
        ({"patternProperties": {"^(a+)+$": True}, "additionalProperties": False}, {HOSTILE: 1}),
        ({"patternProperties": {"^(a+)+$": True}, "unevaluatedProperties": False}, {HOSTILE: 1}),
    ],
)
def test_catastrophic_backtracking_patterns_come_back_with_a_verdict(
    schema: dict[str, Any], instance: Any
) -> None:
    errors = _messages(schema, instance)
    if "pattern" in schema:
        assert errors == [f"{HOSTILE!r} does not match {schema['pattern']!r}"]
    elif "additionalProperties" in schema or "unevaluatedProperties" in schema:
        assert len(errors) == 1 and repr(HOSTILE) in errors[0]
    else:
        assert errors == []  # the key does not match: the integer schema does not apply


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("a", "xax", True),  # search, not match
        ("^a$", "a\n", False),  # ECMA's $ is the end of the text, not before a last newline
        ("^.$", "\n", False),
        ("^.$", "\u2028", False),  # a line terminator in ECMA-262
        ("^.$", "é", True),
        (r"^\u0041\u{1F600}$", "A\U0001f600", True),
        (r"^\uD83D\uDE00$", "\U0001f600", True),  # a surrogate pair is one character
        (r"^\s$", "\u00a0", True),  # ECMA's \s is Unicode white space
        (r"^\S$", "\u3000", False),
        (r"^[\s]$", "\ufeff", True),
        (r"^\d+$", "١٢", False),  # ECMA's \d is ASCII
        (r"^\cJ$", "\n", True),
        (r"^\0$", "\0", True),
        (r"^[^]$", "\n", True),
        (r"^[]", "", False),
        (r"^[\b]$", "\b", True),
        (r"^(?<year>\d{4})$", "2024", True),
        (r"^\p{L}+$", "Ωmega", True),
        (r"^a{2,3}$", "aaaa", False),
        (r"^[a-z]+\/[0-9]$", "ab/1", True),
    ],
)
def test_patterns_have_their_ecma_262_meaning(pattern: str, text: str, matches: bool) -> None:
    assert (_messages({"pattern": pattern}, text) == []) is matches


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^(a)\1$", "it uses a backreference"),
        (r"^(?<x>a)\k<x>$", "it uses a backreference"),
        (r"^a(?=b)", "it uses lookaround"),
        (r"^a(?!b)", "it uses lookaround"),
        (r"(?<=a)b", "it uses lookaround"),
        (r"(?<!a)b", "it uses lookaround"),
    ],
)
def test_a_pattern_re2_cannot_run_is_a_finding_not_a_pass(pattern: str, why: str) -> None:
    expected = (
        f"pattern {pattern!r} could not be checked: {why}, which needs a backtracking engine; "
        "the server runs none on user input"
    )
    assert _messages({"pattern": pattern}, "ab") == [expected]
    assert _messages({"patternProperties": {pattern: True}}, {"ab": 1}) == [expected]
    assert _messages({"pattern": pattern}, 12) == []  # a pattern applies to strings only


def test_the_regex_format_is_checked_by_what_the_server_can_run() -> None:
    schema = {"format": "regex"}
    assert _messages(schema, "^(a+)+$") == []
    assert _messages(schema, "[a-") != []
    [message] = _messages(schema, r"(a)\1")
    assert message.startswith("'(a)\\\\1' is not a 'regex' the server can run: it uses a backref")


def test_other_drafts_get_re2_too() -> None:
    for draft in ("draft-04", "draft-06", "draft-07", "draft/2019-09"):
        uri = f"http://json-schema.org/{draft}/schema#"
        if draft.startswith("draft/"):
            uri = f"https://json-schema.org/{draft}/schema"
        assert _messages({"$schema": uri, "pattern": "^(a+)+$"}, HOSTILE) != []


def test_final_validation_and_the_judge_use_the_factory() -> None:
    schema = '{"type": "string", "pattern": "^(a+)+$"}'
    spec = GrammarSpec(kind=GrammarKind.JSON_SCHEMA, source=schema)
    validation = validate_output(spec, f'"{HOSTILE}"', complete=True)
    assert not validation.valid
    assert validation.errors[0].message == f"{HOSTILE!r} does not match '^(a+)+$'"
    judged = Judge({"type": "string", "pattern": "^(a+)+$"}).text(f'"{HOSTILE}"')
    assert [e.message for e in judged.errors] == [f"{HOSTILE!r} does not match '^(a+)+$'"]


def test_a_lone_surrogate_is_matched_not_a_crash() -> None:
    assert _messages({"pattern": "^a"}, "a\ud800") == []
    assert _messages({"pattern": "^b"}, "a\ud800") != []


def test_a_pattern_re2_refuses_for_its_size_is_a_finding() -> None:
    [message] = _messages({"pattern": "(a{1000}){1000}"}, "a")
    assert message == (
        "pattern '(a{1000}){1000}' could not be checked: RE2 refuses it (invalid repetition size: "
        "{1000})"
    )


def test_translation_leaves_what_re2_already_reads() -> None:
    assert ecma_to_re2(r"^[a-z0-9_]{3,16}$") == r"^[a-z0-9_]{3,16}$"


def test_the_registry_retrieves_nothing() -> None:
    with Listener() as listener:
        with pytest.raises(referencing.exceptions.NoSuchResource):
            REGISTRY.get_or_retrieve(listener.url)
        assert listener.connections == 0
