"""A schema unit test, the grammar's verdict on a text, and a test's result."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.caps import MAX_TESTS, MAX_TEXT_BYTES
from app.engine import Rejection, ReplayResult, Validation

__all__ = ["MAX_TESTS", "MAX_TEXT_BYTES", "Expect", "GrammarVerdict", "SchemaTest",
           "SchemaTestResult"]  # fmt: skip


class Expect(StrEnum):
    """What the author says the grammar must do with a test's text."""

    PASS = "pass"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class SchemaTest:
    """A document and whether it must pass or fail."""

    text: str
    expect: Expect

    def to_dict(self) -> dict[str, str]:
        """The contract's ``{"text", "expect"}``."""
        return {"text": self.text, "expect": self.expect.value}


@dataclass(frozen=True, slots=True)
class GrammarVerdict:
    """What the grammar does with a text: a replay's verdict without its tokens."""

    accepted: bool
    complete: bool
    rejection: Rejection | None

    @classmethod
    def of(cls, result: ReplayResult) -> GrammarVerdict:
        """The verdict of a replay."""
        return cls(result.accepted, result.complete, result.rejection)

    @property
    def passes(self) -> bool:
        """The grammar takes the whole text and can end there."""
        return self.accepted and self.complete

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "accepted": self.accepted,
            "complete": self.complete,
            "rejection": self.rejection.to_dict() if self.rejection else None,
        }


@dataclass(frozen=True, slots=True)
class SchemaTestResult:
    """A test judged.

    Attributes:
        test: the test as given.
        normalized: the text as the grammar writes it (keys in the schema's order, the
            grammar's separators and indent), or None when the text is not JSON or the source
            is EBNF or a regex.
        grammar: the verdict on ``normalized`` (on the text as written when there is none):
            the test is judged on it.
        grammar_as_written: the verdict on the text as written.
        schema: the schema's own verdict (jsonschema or the Pydantic model); None for EBNF and
            regex.
    """

    test: SchemaTest
    normalized: str | None
    grammar: GrammarVerdict
    grammar_as_written: GrammarVerdict
    schema: Validation | None

    @property
    def passed(self) -> bool:
        """The grammar's verdict is the one expected."""
        return self.grammar.passes == (self.test.expect is Expect.PASS)

    @property
    def disagree(self) -> bool:
        """The grammar lets through what the schema forbids, or refuses what it allows."""
        return self.schema is not None and self.schema.valid != self.grammar.passes

    def verdicts(self) -> dict[str, bool | None]:
        """The verdicts a permalink records: ``passed``, the grammar's, the schema's."""
        schema = self.schema.valid if self.schema else None
        return {"passed": self.passed, "grammar": self.grammar.passes, "schema": schema}

    def to_dict(self) -> dict[str, Any]:
        """The contract's result object (with the test's ``expect`` echoed)."""
        return {
            "expect": self.test.expect.value,
            "normalized": self.normalized,
            "grammar": self.grammar.to_dict(),
            "grammar_as_written": self.grammar_as_written.to_dict(),
            "schema": self.schema.to_dict() if self.schema else None,
            "passed": self.passed,
            "disagree": self.disagree,
        }
