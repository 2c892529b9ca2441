"""``python -m app test``: a schema's unit tests, for CI; exit 1 on a failed one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.options import (
    add_grammar_arguments,
    grammar_request,
    load_engine,
)
from app.settings import Settings

if TYPE_CHECKING:
    from app.schematests import SchemaTestResult

__all__ = ["HELP", "NAME", "add_arguments", "run", "test_line"]

NAME = "test"
HELP = "run a schema's unit tests; exit 1 on a failed one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``test``'s flags."""
    add_grammar_arguments(parser)
    parser.add_argument(
        "--tests", required=True, type=Path, help='JSON Lines: {"text", "expect"} a line'
    )
    parser.add_argument("--json", action="store_true", help="JSON Lines: one result a line")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Judge every test, one line each, then a summary; exit 1 when one failed, else 0."""
    from app.schematests import read_tests, run_tests

    tests = read_tests(args.tests.read_text(encoding="utf-8"))
    request = grammar_request(args, settings)
    engine = load_engine(args, settings)
    try:
        validate = request.pydantic.validate_many if request.pydantic else None
        results = run_tests(engine, engine.compile(request.spec), tests, validate_many=validate)
    finally:
        engine.close()
    failed = sum(not r.passed for r in results)
    disagree = sum(r.disagree for r in results)
    for index, result in enumerate(results):
        line = {"index": index, "text": result.test.text, **result.to_dict()}
        print(json.dumps(line, ensure_ascii=False) if args.json else test_line(index, result))
    summary = {"passed": len(results) - failed, "failed": failed, "disagree": disagree}
    print(json.dumps(summary) if args.json else ", ".join(f"{n} {k}" for k, n in summary.items()))
    return 1 if failed else 0


def test_line(index: int, result: SchemaTestResult) -> str:
    """One test for a terminal: verdict, expectation, grammar, schema, and the text judged."""
    grammar = result.grammar
    said = "accepts" if grammar.passes else "incomplete" if grammar.accepted else "refuses"
    if grammar.rejection:
        said += f" at offset {grammar.rejection.offset}"
    schema = "-" if result.schema is None else "valid" if result.schema.valid else "invalid"
    text = result.normalized if result.normalized is not None else result.test.text
    return (
        f"{'PASS' if result.passed else 'FAIL'} {index:>3}  expect {result.test.expect.value:<4}"
        f"  grammar {said:<22} schema {schema:<7}{'  DISAGREE' if result.disagree else ''}"
        f"  {json.dumps(text, ensure_ascii=False)[:80]}"
    )
