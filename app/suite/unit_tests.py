"""A source's schema unit tests (``NAME.tests.jsonl``), run by :mod:`app.schematests` on the
grammar each engine compiled; a failed test is a ``test_failed`` finding at its line."""

from __future__ import annotations

from app.doctor.witnesses import ValidateMany
from app.engine import AnyEngine, CompileResult
from app.exceptions import MaskscopeError
from app.schematests import SchemaTestResult, read_tests, run_tests
from app.suite.discovery import Source
from app.suite.records import Finding, Level

__all__ = ["test_findings"]


def _said(result: SchemaTestResult) -> str:
    grammar = result.grammar
    said = "accepts" if grammar.passes else "stops short" if grammar.accepted else "refuses"
    schema = (
        ""
        if result.schema is None
        else (", the schema says valid" if result.schema.valid else ", the schema says invalid")
    )
    return f"the grammar {said}{schema}"


def test_findings(
    source: Source,
    engine: AnyEngine,
    grammar: CompileResult,
    validate_many: ValidateMany | None,
) -> tuple[list[Finding], dict[str, int] | None]:
    """The failed tests as findings, and ``{"passed", "failed"}`` (None: the source has no
    tests). A tests file that does not parse is one failed test at its line."""
    if source.tests is None:
        return [], None
    file = source.tests_path or source.path
    numbers = [n for n, line in enumerate(source.tests.splitlines(), start=1) if line.strip()]

    def line_of(index: int) -> int:
        if source.tests_path is None:  # a suite line's inline tests: that JSONL line
            return source.line or 1
        return numbers[index] if index < len(numbers) else 1

    try:
        tests = read_tests(source.tests)
        results = run_tests(engine, grammar, tests, validate_many=validate_many)
    except MaskscopeError as error:
        line = error.line if error.line is not None and source.tests_path else line_of(0)
        message = f"the tests did not run: {error.message}"
        return [Finding(Level.TEST_FAILED, message, None, None, line, 1, file)], {
            "passed": 0, "failed": 1,
        }  # fmt: skip
    failed = [
        Finding(
            Level.TEST_FAILED,
            f"test {index} expects {r.test.expect.value}: {_said(r)}",
            None,
            None,
            line_of(index),
            1,
            file,
            r.test.text,
        )  # fmt: skip
        for index, r in enumerate(results)
        if not r.passed
    ]
    return failed, {"passed": len(results) - len(failed), "failed": len(failed)}
