"""Where each value of a JSON text lies: its JSONPath (as ``app.paths.format_path`` writes it)
to its span in code points, so that the page can mark the value a schema error names."""

from __future__ import annotations

import json
import json.decoder
import re
from collections.abc import Callable

from app.paths import format_path

__all__ = ["value_span", "value_spans"]

_SPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")
#: Deeper documents are left unmarked (the scanner recurses once per level).
MAX_DEPTH = 200

Span = tuple[int, int]
_One = Callable[[int, list[str | int], int], int]
#: The standard library's JSON string reader (text, the offset after the opening quote,
#: strict): the string and the offset after its closing quote. typeshed leaves it out.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _Scan:
    def __init__(self, text: str) -> None:
        self.text = text
        self.spans: dict[str, Span] = {}

    def space(self, at: int) -> int:
        match = _SPACE.match(self.text, at)
        return match.end() if match else at

    def value(self, at: int, path: list[str | int]) -> int:
        if len(path) > MAX_DEPTH:
            raise ValueError("too deep to mark")
        char = self.text[at : at + 1]
        if char == "{":
            end = self.members(at + 1, path, "}", self.member)
        elif char == "[":
            end = self.members(at + 1, path, "]", self.item)
        elif char == '"':
            end = _scanstring(self.text, at + 1, False)[1]
        else:
            match = _SCALAR.match(self.text, at)
            if match is None:
                raise ValueError(f"no JSON value at {at}")
            end = match.end()
        self.spans[format_path(path)] = (at, end)
        return end

    def member(self, at: int, path: list[str | int], _: int) -> int:
        if self.text[at : at + 1] != '"':
            raise ValueError(f"no key at {at}")
        key, at = _scanstring(self.text, at + 1, False)
        at = self.space(at)
        if self.text[at : at + 1] != ":":
            raise ValueError(f"no colon at {at}")
        return self.value(self.space(at + 1), [*path, key])

    def item(self, at: int, path: list[str | int], index: int) -> int:
        return self.value(at, [*path, index])

    def members(self, at: int, path: list[str | int], close: str, one: _One) -> int:
        at = self.space(at)
        if self.text[at : at + 1] == close:
            return at + 1
        index = 0
        while True:
            at = self.space(one(self.space(at), path, index))
            index += 1
            char = self.text[at : at + 1]
            if char == close:
                return at + 1
            if char != ",":
                raise ValueError(f"no comma at {at}")
            at += 1


def value_spans(text: str) -> dict[str, Span]:
    """Every value of the JSON ``text`` by its JSONPath (``$``, ``$.tags[1]``, ``$['a b']``):
    its span in code points, end excluded; empty when ``text`` is not one JSON value."""
    scan = _Scan(text)
    try:
        end = scan.value(scan.space(0), [])
    except (ValueError, json.JSONDecodeError, IndexError):
        return {}
    return scan.spans if scan.space(end) == len(text) else {}


def value_span(text: str, path: str) -> Span | None:
    """The span of the value at ``path`` in the JSON ``text``, or None when it has none."""
    return value_spans(text).get(path)
