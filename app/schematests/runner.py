"""Run schema unit tests on one compiled grammar: the grammar's verdict and the schema's."""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.doctor.serialize import normalize
from app.doctor.witnesses import ValidateMany
from app.engine import AnyEngine, CompileResult, Validation
from app.engine.grammars.validation import validate_output
from app.exceptions import GrammarTooSlow, ReplayTooLong
from app.schematests.records import GrammarVerdict, SchemaTest, SchemaTestResult

__all__ = ["run_tests"]


def _verdict(engine: AnyEngine, grammar: CompileResult, text: str, index: int) -> GrammarVerdict:
    try:
        return GrammarVerdict.of(engine.verdict(grammar, text))
    except ReplayTooLong as too_long:
        message = f"test {index}: {too_long.message}"
        raise ReplayTooLong(message, pointer=f"/tests/{index}/text") from None
    except GrammarTooSlow as slow:  # the request's walk budget, spent in this test
        raise GrammarTooSlow(
            f"test {index}: {slow.message}", pointer=f"/tests/{index}/text"
        ) from None


def _schema_verdicts(
    grammar: CompileResult, texts: Sequence[str], validate_many: ValidateMany | None
) -> list[Validation | None]:
    if validate_many is not None:
        return list(validate_many(texts))
    if not grammar.spec.is_json:
        return [None] * len(texts)
    return [validate_output(grammar.spec, text, complete=True) for text in texts]


def run_tests(
    engine: AnyEngine,
    grammar: CompileResult,
    tests: Sequence[SchemaTest],
    *,
    validate_many: ValidateMany | None = None,
) -> list[SchemaTestResult]:
    """Judge each test by the grammar (a replay, no model) and by the schema.

    A JSON document is also replayed as the grammar writes it (``normalized``) and the test is
    judged on that form: a document written by hand rarely has the grammar's key order,
    separators and indent, which says nothing about the values it holds.

    Args:
        engine: the engine whose tokenizer the grammar was compiled for.
        grammar: the compiled grammar (a Pydantic source compiles as its derived JSON Schema).
        tests: the tests, in order.
        validate_many: the Pydantic model's verdicts for a Pydantic source (all texts in one
            sandbox process); JSON Schema sources are checked with jsonschema, EBNF and regex
            have no schema verdict.

    Raises:
        ReplayTooLong: a text (as written or normalised) longer than a replay may walk.
        GrammarTooSlow: the walks used up the walk budget in force (its test in the pointer).
        SandboxUnconfined, SourceRefused, PydanticFailed: from ``validate_many``.
    """
    schema = json.loads(grammar.spec.source) if grammar.spec.is_json else None
    results: list[SchemaTestResult] = []
    for index, test in enumerate(tests):
        written = _verdict(engine, grammar, test.text, index)
        normalized = None
        if schema is not None:
            normalized = normalize(test.text, schema, grammar.spec.options)
        judged = written
        if normalized is not None and normalized != test.text:
            judged = _verdict(engine, grammar, normalized, index)
        results.append(SchemaTestResult(test, normalized, judged, written, None))
    verdicts = _schema_verdicts(grammar, [t.text for t in tests], validate_many)
    return [
        SchemaTestResult(r.test, r.normalized, r.grammar, r.grammar_as_written, verdict)
        for r, verdict in zip(results, verdicts, strict=True)
    ]
