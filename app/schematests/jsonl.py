"""The tests file of the command line: JSON Lines, one ``{"text", "expect"}`` object a line."""

from __future__ import annotations

import json

from app.exceptions import InvalidInput
from app.jsontext import loads
from app.schematests.records import MAX_TESTS, MAX_TEXT_BYTES, Expect, SchemaTest

__all__ = ["read_tests"]


def _test(line: str, number: int) -> SchemaTest:
    try:
        value = loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON: {exc.msg}", line=number, column=exc.colno) from None
    if not isinstance(value, dict) or set(value) - {"text", "expect"}:
        raise InvalidInput('a test is an object {"text": str, "expect": "pass"|"fail"}',
                           line=number)  # fmt: skip
    text, expect = value.get("text"), value.get("expect")
    if not isinstance(text, str):
        raise InvalidInput("a test needs a string text", line=number, pointer="/text")
    if expect not in ("pass", "fail"):
        raise InvalidInput(f'expect must be "pass" or "fail", not {expect!r}', line=number,
                           pointer="/expect")  # fmt: skip
    size = len(text.encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise InvalidInput(f"the text is {size} bytes; a test may hold {MAX_TEXT_BYTES}",
                           line=number, pointer="/text")  # fmt: skip
    return SchemaTest(text, Expect(expect))


def read_tests(content: str) -> list[SchemaTest]:
    """The tests of a JSON Lines file (blank lines skipped).

    Raises:
        InvalidInput: a line that is not a test (with its line number), or more than
            :data:`MAX_TESTS` tests.
    """
    tests = [
        _test(line, number)
        for number, line in enumerate(content.splitlines(), start=1)
        if line.strip()
    ]
    if len(tests) > MAX_TESTS:
        raise InvalidInput(f"the file holds {len(tests)} tests; a run takes at most {MAX_TESTS}")
    return tests
