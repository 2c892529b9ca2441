"""What the Doctor reports, as plain records; ``to_dict`` gives the API's JSON (``shared/API.md``,
"Doctor")."""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.doctor.judge import WitnessError
from app.doctor.spans import value_spans
from app.jsontext import loads

__all__ = [
    "BackendRow",
    "Costs",
    "DoctorReport",
    "Enforcement",
    "Finding",
    "KeywordFinding",
    "Message",
    "marked",
    "Refusal",
    "Search",
    "Status",
    "Verdict",
    "Witness",
]


def _escaped(text: str, *, lines: bool) -> str:
    """Invisible characters as ``\\uXXXX`` (newlines and tabs kept when ``lines``)."""
    return "".join(
        f"\\u{ord(c):04x}"
        if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and not (lines and c in "\n\t")
        else c
        for c in text
    )


def marked(text: str | None, span: tuple[int, int] | None) -> tuple[str, str, str]:
    """``text`` cut at ``span`` (before, the part marked, after), invisible characters shown
    escaped: everywhere in the marked part, everywhere but newlines and tabs outside it."""
    if text is None:
        return ("", "", "")
    start, end = span if span else (len(text), len(text))
    return (
        _escaped(text[:start], lines=True),
        _escaped(text[start:end], lines=False),
        _escaped(text[end:], lines=True),
    )


class Status(StrEnum):
    """How xgrammar treats one keyword; the first that applies wins, in this order."""

    IGNORED = "ignored"  # the grammar is the same text without it
    WEAKENED = "weakened"  # a document the grammar accepts breaks it (a witness)
    WARNED = "warned"  # xgrammar printed a warning about it
    ENFORCED = "enforced"  # none of the above
    UNCHECKED = "unchecked"  # the time bound was reached before it was compared


class Verdict(StrEnum):
    """What a serving stack does with the schema."""

    OK = "ok"
    IGNORES = "ignores"
    FALLS_BACK = "falls_back"
    REFUSES = "refuses"


@dataclass(frozen=True)
class KeywordFinding:
    """One constraint keyword and how it is enforced.

    Attributes:
        witness: the document built to break it that the grammar accepts, if any.
        span: where, in ``witness``, the part built against the keyword is (code points).
        note: why no document breaking it can exist or be built, when none was.
    """

    pointer: str
    keyword: str
    line: int | None
    status: Status
    detail: str
    witness: str | None = None
    span: tuple[int, int] | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        span = list(self.span) if self.span else None
        return dataclasses.asdict(self) | {"status": self.status.value, "span": span}

    def parts(self) -> tuple[str, str, str]:
        """The witness cut at its span, invisible characters escaped (for the page)."""
        return marked(self.witness, self.span)


@dataclass(frozen=True)
class Refusal:
    """Where the grammar refuses a document: the first refused character (in code points from
    the start; the length of the text when it refuses to end there) and what it accepts there."""

    offset: int
    expected: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"offset": self.offset, "expected": list(self.expected)}


class Direction(StrEnum):
    """Which side a witness proves wrong."""

    GRAMMAR_ACCEPTS = "grammar_accepts_schema_rejects"
    SCHEMA_ACCEPTS = "schema_accepts_grammar_refuses"


@dataclass(frozen=True)
class Witness:
    """A document on which the grammar and the schema disagree."""

    direction: Direction
    text: str
    errors: tuple[WitnessError, ...] = ()
    refusal: Refusal | None = None

    @property
    def pointers(self) -> tuple[str, ...]:
        """The schema keywords the errors point at (the keywords the grammar weakens)."""
        return tuple(dict.fromkeys(e.pointer for e in self.errors if e.pointer))

    def parts(self) -> tuple[str, str, str]:
        """The text cut at its offending part (the refused character, the one that makes it not
        JSON, or the value the schema rejects: :meth:`failing`), invisible characters escaped
        (for the page)."""
        if self.refusal is not None:
            at = self.refusal.offset
            return marked(self.text, (at, min(at + 1, len(self.text))))
        try:
            loads(self.text, long_integers=True)
        except json.JSONDecodeError as exc:
            return marked(self.text, (exc.pos, min(exc.pos + 1, len(self.text))))
        failing = self.failing()
        return marked(self.text, failing[1] if failing else None)

    def failing(self) -> tuple[WitnessError, tuple[int, int]] | None:
        """The schema's first error that names a value of ``text``, and where that value lies
        (code points): the value the grammar let through. None when every error is at the
        document itself (``$``: marking all of it says nothing) or names no value of it."""
        spans = value_spans(self.text)
        for error in self.errors:
            if error.path != "$" and error.path in spans:
                return error, spans[error.path]
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "direction": self.direction.value,
            "text": self.text,
            "errors": [e.to_dict() for e in self.errors],
            "refusal": self.refusal.to_dict() if self.refusal else None,
            "pointers": list(self.pointers),
        }


@dataclass(frozen=True)
class Finding:
    """One cause of disagreement between the grammar and the schema, in words.

    Attributes:
        cause: what happens, e.g. "xgrammar ignores uniqueItems: the grammar writes repeated
            items".
        direction: ``grammar_accepts_schema_rejects``, ``schema_accepts_grammar_refuses``, or
            ``not_json`` (the grammar accepts a document that is not JSON at all).
        keywords: the keywords (as written) the cause concerns.
        pointers: their JSON pointers.
        count: the documents found with this cause (built or searched).
        example: one of them (None when none can be built: see ``note``).
        span: the offending part of ``example`` (code points, end excluded).
        note: why no witness can be built, or what else to know.
    """

    cause: str
    direction: str
    keywords: tuple[str, ...]
    pointers: tuple[str, ...]
    count: int
    example: str | None
    span: tuple[int, int] | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the contract's ``findings`` item)."""
        out = dataclasses.asdict(self)
        out["keywords"], out["pointers"] = list(self.keywords), list(self.pointers)
        out["span"] = list(self.span) if self.span else None
        return out

    def parts(self) -> tuple[str, str, str]:
        """The example cut at its span, invisible characters escaped (for the page)."""
        return marked(self.example, self.span)


@dataclass(frozen=True)
class Search:
    """How the witness search went."""

    seed: int
    grammar_documents: int
    schema_documents: int
    ms: float
    cut_short: bool
    unchecked_formats: tuple[str, ...] = ()
    #: Keywords whose documents would pass the size caps, so were not built (in words).
    too_large: tuple[str, ...] = ()
    #: ``cut_short`` by the wall-clock safety stop (a busy machine), not by a count: the same
    #: request on a machine with time to spare finds more.
    cut_short_by_load: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``documents`` the total of both directions."""
        out = dataclasses.asdict(self)
        out["documents"] = self.grammar_documents + self.schema_documents
        out["unchecked_formats"] = list(self.unchecked_formats)
        out["too_large"] = list(self.too_large)
        return out


@dataclass(frozen=True)
class Enforcement:
    """How the keyword comparison went: keywords compared of all, time, cut short or not (and
    whether by the wall-clock safety stop, a busy machine, rather than by a count)."""

    checked: int
    total: int
    ms: float
    cut_short: bool
    cut_short_by_load: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Message:
    """A line of a backend row, with the JSON pointer it is about when there is one."""

    message: str
    pointer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BackendRow:
    """One serving stack: its verdict, why, and the version of the rules it reproduces."""

    backend: str
    rules_version: str
    verdict: Verdict
    messages: tuple[Message, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "backend": self.backend,
            "rules_version": self.rules_version,
            "verdict": self.verdict.value,
            "messages": [m.to_dict() for m in self.messages],
        }


@dataclass(frozen=True)
class Costs:
    """What the grammar costs. ``shortest_document_tokens`` is an upper bound: the fewest tokens
    of the complete documents the search wrote, not a proven minimum."""

    compile_ms: float
    compile_ms_any_whitespace: float | None
    size_bytes: int
    shortest_document_tokens: int | None
    shortest_document: str | None
    unbounded_whitespace: bool
    max_tokens_below_shortest: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DoctorReport:
    """Everything the Doctor found about one grammar request."""

    keywords: tuple[KeywordFinding, ...]
    witnesses: tuple[Witness, ...]
    search: Search | None
    enforcement: Enforcement | None
    backends: tuple[BackendRow, ...]
    costs: Costs
    findings: tuple[Finding, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``POST /api/doctor`` answer."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "keywords": [k.to_dict() for k in self.keywords],
            "witnesses": [w.to_dict() for w in self.witnesses],
            "search": self.search.to_dict() if self.search else None,
            "enforcement": self.enforcement.to_dict() if self.enforcement else None,
            "backends": [b.to_dict() for b in self.backends],
            "costs": self.costs.to_dict(),
        }

    def counts(self) -> dict[str, int]:
        """Keywords by status."""
        out = {status.value: 0 for status in Status}
        for finding in self.keywords:
            out[finding.status.value] += 1
        return out
