"""Which kind of source a file is: the longest suffix of the table that its name ends with."""

from __future__ import annotations

__all__ = ["SUFFIXES", "TESTS_SUFFIX", "kind_of"]

#: Suffix -> source kind. The longest match wins (``x.tools.json`` is tools, not a JSON Schema).
#: A new source kind is one line here.
SUFFIXES: dict[str, str] = {
    ".request.json": "request",
    ".tools.json": "tools",
    ".tag.json": "structural_tag",
    ".json": "json_schema",
    ".py": "pydantic",
    ".ebnf": "ebnf",
    ".regex": "regex",
}
#: A source's schema unit tests sit beside it: ``NAME.tests.jsonl`` for ``NAME.<suffix>``.
TESTS_SUFFIX = ".tests.jsonl"


def kind_of(name: str) -> tuple[str, str] | None:
    """``(kind, suffix)`` of a file name, or None when no suffix of the table matches."""
    lowered = name.lower()
    matches = [suffix for suffix in SUFFIXES if lowered.endswith(suffix)]
    if not matches:
        return None
    suffix = max(matches, key=len)
    return SUFFIXES[suffix], suffix
