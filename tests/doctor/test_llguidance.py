"""llguidance run for real with the model's tokenizer."""

from __future__ import annotations

import json

from app.doctor import Doctor, Verdict
from app.engine import CompileOptions, GrammarKind
from app.examples import EXAMPLES_DIR


def test_an_unimplemented_keyword_is_refused_and_ignored_when_lenient(doctor: Doctor) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    row = doctor.llguidance.assess_schema(schema, CompileOptions())
    assert row.verdict is Verdict.REFUSES
    assert row.rules_version.startswith("llguidance 1.7.6")
    messages = [(m.message, m.pointer) for m in row.messages]
    assert ('Unimplemented keys: ["uniqueItems"]', "/properties/tags/uniqueItems") in messages
    assert any(m.startswith("with lenient: ignores: Unimplemented keys") for m, _ in messages)
    assert doctor.llguidance.schema_error(schema) == 'Unimplemented keys: ["uniqueItems"]'


def test_the_examples_compile(doctor: Doctor) -> None:
    schema = json.loads((EXAMPLES_DIR / "nested.json").read_text())
    assert doctor.llguidance.assess_schema(schema, CompileOptions()).verdict is Verdict.OK
    assert doctor.llguidance.schema_error(schema) == ""


def test_grammars_and_regexes(doctor: Doctor) -> None:
    ok = doctor.llguidance.assess_grammar(GrammarKind.EBNF, 'root ::= "a" | "b" [0-9]+\n')
    assert ok.verdict is Verdict.OK
    lookaround = doctor.llguidance.assess_grammar(GrammarKind.REGEX, "(?<=a)b")
    assert lookaround.verdict is Verdict.REFUSES
    assert "look-around" in lookaround.messages[0].message
    # xgrammar's lookahead assertion has no Lark form in llguidance's translator.
    lookahead = doctor.llguidance.assess_grammar(GrammarKind.EBNF, 'root ::= "a" (= "b") "b"')
    assert lookahead.verdict is Verdict.REFUSES
    assert "does not translate" in lookahead.messages[0].message
