"""OpenAI Structured Outputs in strict mode: its documented rules and limits, as data.

Source: OpenAI's Structured Outputs guide, section "Supported schemas", as documented in
February 2026: the root is an object and not ``anyOf``; every object sets
``additionalProperties: false`` and lists every property in ``required``; ``allOf``, ``not``,
``if``/``then``/``else``, ``dependentRequired`` and ``dependentSchemas`` are not supported;
strings may name only the listed formats; and the limits below. A schema that breaks one is
refused (HTTP 400) before any generation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.doctor.keywords import resolve_ref
from app.doctor.records import BackendRow, Message, Verdict
from app.paths import pointer_from_parts

__all__ = ["LIMITS", "RULES_VERSION", "UNSUPPORTED_KEYWORDS", "assess", "violations"]

RULES_VERSION = "OpenAI Structured Outputs, strict mode, supported schemas (documented 2026-02)"
UNSUPPORTED_KEYWORDS = (
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
)
FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
LIMITS = {
    "nesting": 10,  # levels of nested objects
    "properties": 5000,  # object properties in the whole schema
    "enum_values": 1000,  # enum values in the whole schema
    "string_length": 120_000,  # characters of property names, definition names, enum and const
    "large_enum": 250,  # an enum of more values than this...
    "large_enum_length": 15_000,  # ...may hold at most this many characters of strings
}
_CHILDREN = ("properties", "$defs", "definitions")
_ONE = ("items", "additionalProperties", "not", "if", "then", "else")
_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")


def _walk(
    node: Any, parts: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:  # noqa: E501
    if not isinstance(node, dict):
        return
    yield parts, node
    for key in _CHILDREN:
        if isinstance(node.get(key), dict):
            for name, child in node[key].items():
                yield from _walk(child, (*parts, key, name))
    for key in _ONE:
        yield from _walk(node.get(key), (*parts, key))
    for key in _LIST:
        if isinstance(node.get(key), list):
            for index, child in enumerate(node[key]):
                yield from _walk(child, (*parts, key, index))


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _depth(root: Any, node: Any, seen: frozenset[str] = frozenset()) -> int:
    """Levels of nested objects below and including ``node`` (``$ref`` followed, cycles cut)."""
    if not isinstance(node, dict):
        return 0
    if isinstance(node.get("$ref"), str) and node["$ref"] not in seen:
        target = resolve_ref(root, node["$ref"])
        return _depth(root, target[1], seen | {node["$ref"]}) if target else 0
    inner = [
        node.get("items"),
        *(node.get("properties") or {}).values(),
        *(node.get("anyOf") or []),
    ]
    below = max((_depth(root, child, seen) for child in inner), default=0)
    return below + (1 if _is_object(node) else 0)


def _object_rules(pointer: str, node: dict[str, Any]) -> Iterator[Message]:
    if node.get("additionalProperties") is not False:
        yield Message("every object must set additionalProperties: false", pointer)
    missing = [n for n in (node.get("properties") or {}) if n not in (node.get("required") or [])]
    if missing:
        yield Message(
            f"every property must be required; not required: {', '.join(missing)}", pointer
        )


def _limits(schema: Any, nodes: list[tuple[str, dict[str, Any]]]) -> Iterator[Message]:
    properties = sum(len(n.get("properties") or {}) for _, n in nodes)
    enums = [n["enum"] for _, n in nodes if isinstance(n.get("enum"), list)]
    strings = sum(len(name) for _, n in nodes for key in _CHILDREN for name in (n.get(key) or {}))
    strings += sum(len(v) for values in enums for v in values if isinstance(v, str))
    strings += sum(len(n["const"]) for _, n in nodes if isinstance(n.get("const"), str))
    figures = (
        ("nesting", _depth(schema, schema), "levels of nested objects"),
        ("properties", properties, "object properties"),
        ("enum_values", sum(len(e) for e in enums), "enum values"),
        ("string_length", strings, "characters of names, enum and const values"),
    )
    for name, value, what in figures:
        if value > LIMITS[name]:
            yield Message(f"{value} {what}; the limit is {LIMITS[name]}")
    for pointer, node in nodes:
        values = node.get("enum")
        if isinstance(values, list) and len(values) > LIMITS["large_enum"]:
            length = sum(len(v) for v in values if isinstance(v, str))
            if length > LIMITS["large_enum_length"]:
                yield Message(
                    f"an enum of {len(values)} values holds {length} characters; the "
                    f"limit above {LIMITS['large_enum']} values is "
                    f"{LIMITS['large_enum_length']}",
                    pointer,
                )


def violations(schema: Any) -> list[Message]:
    """Every strict-mode rule and limit the schema breaks."""
    nodes = [(pointer_from_parts(parts), node) for parts, node in _walk(schema)]
    out: list[Message] = []
    if not isinstance(schema, dict) or schema.get("type") != "object" or "anyOf" in schema:
        out.append(Message("the root must be an object (type: object), not anyOf", ""))
    for pointer, node in nodes:
        out += [
            Message(f"{key} is not supported", f"{pointer}/{key}")
            for key in UNSUPPORTED_KEYWORDS
            if key in node
        ]
        if isinstance(node.get("format"), str) and node["format"] not in FORMATS:
            out.append(Message(f"format {node['format']!r} is not supported", f"{pointer}/format"))
        if _is_object(node):
            out += _object_rules(pointer, node)
    return out + list(_limits(schema, nodes))


def assess(schema: Any) -> BackendRow:
    """Would OpenAI accept the schema with ``strict: true``."""
    found = violations(schema)
    if found:
        return BackendRow("openai_strict", RULES_VERSION, Verdict.REFUSES, tuple(found))
    return BackendRow("openai_strict", RULES_VERSION, Verdict.OK, (Message("accepted"),))
