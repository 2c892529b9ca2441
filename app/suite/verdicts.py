"""The Doctor's report, read as findings: nothing here proves anything, it only names what the
Doctor proved (:class:`app.doctor.DoctorReport`) at its place in the file.

- xgrammar: each keyword ``ignored`` or ``weakened``; each cause of documents the schema accepts
  and the grammar refuses (``over_restricted``); what a tool tag leaves free (``unconstrained``,
  the messages of xgrammar's row that name a tool's arguments); a cause of documents the grammar
  accepts that no keyword row names (``weakened``); a tool the tag cannot call
  (``over_restricted``).
- llguidance: the keywords llguidance's row says it ignores, and its refusal.
"""

from __future__ import annotations

from collections.abc import Callable

from app.doctor import DoctorReport, KeywordFinding, Status, Verdict
from app.suite.records import Finding, Level

__all__ = ["Place", "llguidance_findings", "xgrammar_findings"]

#: A pointer's place in the file: ``(line, column)``.
Place = Callable[[str | None], tuple[int, int]]

_LEVELS = {Status.IGNORED: Level.IGNORED, Status.WEAKENED: Level.WEAKENED}
_REFUSES = "schema_accepts_grammar_refuses"
#: What xgrammar's row says of a tool whose call, or part of it, is left free.
_FREE_MARKS = ("any JSON", "not constrained", "any_order")
#: ... and of a tool the tag built cannot call at all.
_NO_CALL = "the tag built has no call of"


def _finding(level: Level, message: str, pointer: str | None, place: Place, file: str,
             keyword: str | None = None, witness: str | None = None) -> Finding:  # fmt: skip
    line, column = place(pointer)
    return Finding(level, message, pointer, keyword, line, column, file, witness)


def _row_messages(report: DoctorReport, *marks: str) -> list[tuple[str, str]]:
    """xgrammar's row's messages with a pointer that say one of ``marks``: (message, pointer)."""
    row = next((r for r in report.backends if r.backend == "xgrammar"), None)
    if row is None:
        return []
    return [
        (m.message, m.pointer)
        for m in row.messages
        if m.pointer and any(mark in m.message for mark in marks)
    ]


def _covered(keyword: KeywordFinding, free: list[tuple[str, str]]) -> bool:
    """A keyword ignored only because its whole tool call is free (one finding says it)."""
    return keyword.status is Status.IGNORED and any(
        keyword.pointer.startswith(pointer + "/") and "any_order" not in message
        for message, pointer in free
    )


def xgrammar_findings(report: DoctorReport, place: Place, file: str) -> list[Finding]:
    """What the Doctor found of xgrammar's compile, as findings."""
    free = _row_messages(report, *_FREE_MARKS)
    out = [
        _finding(Level.UNCONSTRAINED, message, pointer, place, file) for message, pointer in free
    ]
    out += [
        _finding(Level.OVER_RESTRICTED, message, pointer, place, file)
        for message, pointer in _row_messages(report, _NO_CALL)
    ]
    named: set[str] = set()
    for k in report.keywords:
        if k.status in _LEVELS and not _covered(k, free):
            named.add(k.pointer)
            out.append(_finding(_LEVELS[k.status], f"{k.keyword} {k.status.value}: {k.detail}",
                                k.pointer, place, file, k.keyword, k.witness))  # fmt: skip
    for cause in report.findings:
        pointer = cause.pointers[0] if cause.pointers else None
        keyword = cause.keywords[0] if cause.keywords else None
        if cause.direction == _REFUSES:
            out.append(_finding(Level.OVER_RESTRICTED, cause.cause, pointer, place, file,
                                keyword, cause.example))  # fmt: skip
        elif not named.intersection(cause.pointers) and not (free and pointer is None):
            out.append(_finding(Level.WEAKENED, cause.cause, pointer, place, file, keyword,
                                cause.example))  # fmt: skip
    return out


def llguidance_findings(report: DoctorReport, place: Place, file: str) -> list[Finding]:
    """What llguidance's row (llguidance run for real, with this tokenizer) says, as findings:
    a refusal is a compile error, each keyword it ignores an ``ignored`` finding."""
    row = next((r for r in report.backends if r.backend == "llguidance"), None)
    if row is None or row.verdict is Verdict.OK:
        return []
    level = Level.COMPILE_ERROR if row.verdict is Verdict.REFUSES else Level.IGNORED
    return [
        _finding(level, m.message, m.pointer or None, place, file, _keyword_of(m.pointer))
        for m in row.messages
    ]


def _keyword_of(pointer: str | None) -> str | None:
    return pointer.rsplit("/", 1)[-1] if pointer else None
