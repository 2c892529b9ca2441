"""Why a replayed text was refused, in the schema's terms rather than the tokenizer's.

Read from the replay's own facts (the refused offset, the JSON path the parser was at) and the
schema at that path: whitespace the compile options refuse (and which presets accept the text,
found by replaying it under them), an ``enum``/``const`` and its values, a string ``format``, a
``pattern`` (before a length bound, which xgrammar ignores beside it), a ``maxLength`` reached,
a number's ``maximum``, a ``maxItems`` or ``minItems`` bound. A value inside an array is named
with its index (``$.tags[1]``); an array's bounds with the array's path. Nothing is guessed: no rule
applies, no cause is given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.engine import CompileOptions, Rejection
from app.paths import escape_token, parse_path

__all__ = ["ReplayCause", "explain", "schema_at"]

_WHITESPACE = {" ": "a space", "\n": "a newline", "\t": "a tab", "\r": "a carriage return"}
_FORMATS = {
    "email": "an email address", "date": "a date (YYYY-MM-DD)", "time": "a time (HH:MM:SS)",
    "date-time": "a date-time (RFC 3339)", "uuid": "a UUID", "ipv4": "an IPv4 address",
    "ipv6": "an IPv6 address", "uri": "a URI", "hostname": "a hostname",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplayCause:
    """A refusal explained.

    Attributes:
        message: the cause in schema terms.
        pointer: JSON pointer of the keyword at fault in the (derived) schema, if any.
        line: its line in the editor, if known.
        whitespace: the refusal is whitespace the compile options do not allow.
    """

    message: str
    pointer: str | None = None
    line: int | None = None
    whitespace: bool = False


def _expand(root: dict[str, Any], node: Any, pointer: str, depth: int = 0) -> list[tuple[str, Any]]:
    """``node`` and what it stands for: the target of a ``$ref``, the branches of a union."""
    if not isinstance(node, dict) or depth > 16:
        return []
    found: list[tuple[str, Any]] = [(pointer, node)]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key) if isinstance(target, dict) else None
        found += _expand(root, target, ref[1:], depth + 1)
    for union in ("anyOf", "oneOf", "allOf"):
        for i, branch in enumerate(node.get(union) or []):
            found += _expand(root, branch, f"{pointer}/{union}/{i}", depth + 1)
    return found


def schema_at(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """The subschemas (pointer, schema) that may describe the value at a JSONPath."""
    parts = parse_path(path)
    if parts is None:
        return []
    current = _expand(schema, schema, "")
    for part in parts:
        following: list[tuple[str, Any]] = []
        for pointer, node in current:
            if isinstance(part, str) and isinstance(node.get("properties"), dict):
                if part in node["properties"]:
                    child = f"{pointer}/properties/{escape_token(part)}"
                    following += _expand(schema, node["properties"][part], child)
            elif isinstance(part, int):
                prefix = node.get("prefixItems")
                if isinstance(prefix, list) and part < len(prefix):
                    following += _expand(schema, prefix[part], f"{pointer}/prefixItems/{part}")
                elif isinstance(node.get("items"), dict):
                    following += _expand(schema, node["items"], f"{pointer}/items")
        current = following
    return current


def _keyword(
    nodes: list[tuple[str, dict[str, Any]]], keyword: str
) -> tuple[str, Any] | tuple[None, None]:
    for pointer, node in nodes:
        if keyword in node:
            return f"{pointer}/{keyword}", node[keyword]
    return None, None


def _refused(char: str) -> str:
    return "the end of the string" if char == '"' else json.dumps(char)


def _pattern(
    nodes: list[tuple[str, dict[str, Any]]], text: str, rejection: Rejection, path: str, char: str
) -> tuple[str, str] | None:
    """A string's ``pattern``: xgrammar enforces it and ignores a length bound beside it
    (xgrammar#966), so the pattern refused, whatever the string's length."""
    pointer, pattern = _keyword(nodes, "pattern")
    if pointer is None or not isinstance(pattern, str):
        return None
    start = text.rfind('"', 0, rejection.offset)
    so_far = text[start + 1 : rejection.offset] if start >= 0 else ""
    return (
        f"{path} must match the pattern {json.dumps(pattern)} (pattern): after"
        f" {json.dumps(so_far)} the grammar refuses {_refused(char)}",
        pointer,
    )


def _maximum(
    nodes: list[tuple[str, dict[str, Any]]], text: str, rejection: Rejection, path: str, char: str
) -> tuple[str, str] | None:
    """A number's ``maximum`` or ``exclusiveMaximum``: a digit that takes it past the bound."""
    if not char.isdigit():
        return None
    for keyword, words in (("maximum", "at most"), ("exclusiveMaximum", "below")):
        pointer, limit = _keyword(nodes, keyword)
        if pointer is not None and isinstance(limit, int | float):
            digits = re.search(r"-?[0-9.]*$", text[: rejection.offset])
            so_far = digits.group(0) if digits else ""
            return (
                f"the number at {path} must be {words} {limit} ({keyword}): after"
                f" {json.dumps(so_far)} the grammar refuses {json.dumps(char)}",
                pointer,
            )
    return None


def _string_so_far(text: str, offset: int) -> int:
    start = text.rfind('"', 0, offset)
    return len(text[start + 1 : offset]) if start >= 0 else 0


def explain(
    *,
    schema: dict[str, Any] | None,
    text: str,
    rejection: Rejection,
    path: str,
    options: CompileOptions,
    line_of: Callable[[str], int | None] | None = None,
) -> ReplayCause | None:
    """The cause of ``rejection`` in schema terms, or None when no rule names one.

    Args:
        schema: the JSON Schema compiled (the derived one for Pydantic); None for EBNF and regex.
        text: the replayed text.
        rejection: where the grammar refused it.
        path: the JSON path the parser was at when the refused token's mask was computed.
        options: the effective compile options.
        line_of: the editor line of a schema pointer.
    """
    if schema is None:
        return None
    char = text[rejection.offset : rejection.offset + 1]
    if char in _WHITESPACE and not options.any_whitespace:
        separators = options.separators or (", ", ": ")
        return ReplayCause(
            f"{_WHITESPACE[char]} at offset {rejection.offset} is refused by the compile options,"
            " not by the schema: any_whitespace=false allows no whitespace between JSON tokens"
            f" but the separators ({json.dumps(separators[0])} and {json.dumps(separators[1])})",
            whitespace=True,
        )
    nodes = schema_at(schema, path)
    parent = re.sub(r"\[\d+\]$", "", path)
    if parent != path:  # an item: its array's bounds count too
        nodes += schema_at(schema, parent)
    cause = _bound(nodes, text, rejection, path, parent, char)
    if cause is None:
        return None
    message, pointer = cause
    return ReplayCause(message, pointer, line_of(pointer) if line_of else None)


def _bound(
    nodes: list[tuple[str, dict[str, Any]]],
    text: str,
    rejection: Rejection,
    path: str,
    array: str,
    char: str,
) -> tuple[str, str] | None:
    """The keyword at fault and its message: ``path`` names the value refused (with its index
    in an array), ``array`` the array it is in (``path`` itself when it is in none)."""
    pointer, values = _keyword(nodes, "enum")
    if pointer is not None and isinstance(values, list):
        shown = " | ".join(json.dumps(v) for v in values)
        return f"{path} must be one of {shown} (enum)", pointer
    pointer, value = _keyword(nodes, "const")
    if pointer is not None:
        return f"{path} must be {json.dumps(value)} (const)", pointer
    pointer, fmt = _keyword(nodes, "format")
    if pointer is not None and isinstance(fmt, str):
        start = text.rfind('"', 0, rejection.offset)
        so_far = text[start + 1 : rejection.offset] if start >= 0 else ""
        refused = _refused(char)
        what = _FORMATS.get(fmt, f'a string of format "{fmt}"')
        return (
            f'{path} must be {what} (format "{fmt}"): after {json.dumps(so_far)} the grammar'
            f" refuses {refused}",
            pointer,
        )
    found = _pattern(nodes, text, rejection, path, char)
    if found is not None:
        return found
    pointer, limit = _keyword(nodes, "maxLength")
    have = _string_so_far(text, rejection.offset)
    if pointer is not None and char != '"' and isinstance(limit, int) and have >= limit:
        return (
            f"the string at {path} is limited to maxLength {limit} characters"
            f" (it has {have} at the refusal)",
            pointer,
        )
    found = _maximum(nodes, text, rejection, path, char)
    if found is not None:
        return found
    pointer, limit = _keyword(nodes, "maxItems")
    if pointer is not None and char == ",":
        return f"the array at {array} holds at most maxItems {limit} items", pointer
    pointer, limit = _keyword(nodes, "minItems")
    if pointer is not None and char == "]":
        return f"the array at {array} needs at least minItems {limit} items", pointer
    return None
