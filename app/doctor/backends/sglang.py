"""SGLang's check of a JSON Schema before xgrammar compiles it, reproduced from its source.

Source: SGLang 0.5.23, ``sglang/srt/constrained/json_schema_validation.py``
(``validate_xgrammar_json_schema``, called by ``XGrammarGrammarBackend.dispatch_json``, the
default grammar backend). A schema it rejects becomes an invalid grammar object and the request
is aborted with HTTP 400 "Failed to compile json grammar: JSON Schema at #/... is not supported by
xgrammar: ...". SGLang raises at the first failure it meets (its walk order follows a frozenset,
so which one is not fixed); every failure is listed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.doctor.records import BackendRow, Message, Verdict
from app.paths import escape_token

__all__ = ["RULES_VERSION", "UNSUPPORTED_KEYWORDS", "XGRAMMAR_FORMATS", "assess", "failures"]

RULES_VERSION = "SGLang 0.5.23 (sglang/srt/constrained/json_schema_validation.py)"

#: ``_XGRAMMAR_UNSUPPORTED_KEYWORDS``: refused anywhere in the schema.
UNSUPPORTED_KEYWORDS = frozenset(
    {
        "contains",
        "dependentRequired",
        "dependentSchemas",
        "else",
        "if",
        "maxContains",
        "minContains",
        "multipleOf",
        "not",
        "then",
        "uniqueItems",
    }
)
#: ``_XGRAMMAR_STRING_FORMATS``: the formats a string schema may name.
XGRAMMAR_FORMATS = frozenset(
    {
        "date",
        "date-time",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "json-pointer",
        "relative-json-pointer",
        "time",
        "uri",
        "uri-reference",
        "uri-template",
        "uuid",
    }
)
#: Where SGLang's walk looks for subschemas (it never reads instance data such as enum values).
_ONE = (
    "additionalItems",
    "additionalProperties",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")
#: String constraints that cannot be enforced together: more than one group is refused.
_STRING_GROUPS = (
    ("format", ("format",)),
    ("pattern", ("pattern",)),
    ("minLength/maxLength", ("minLength", "maxLength")),
)


def _subschemas(schema: Any, pointer: str = "#") -> Iterator[tuple[dict[str, Any], str]]:
    """``_iter_subschemas``: schema-bearing keywords only (``$ref`` is not followed)."""
    if not isinstance(schema, dict):
        return
    yield schema, pointer
    for key in _ONE:
        child = schema.get(key)
        if isinstance(child, bool | dict):
            yield from _subschemas(child, f"{pointer}/{key}")
        elif key == "items" and isinstance(child, list):
            for index, item in enumerate(child):
                yield from _subschemas(item, f"{pointer}/{key}/{index}")
    for key in _LIST:
        if isinstance(schema.get(key), list):
            for index, child in enumerate(schema[key]):
                yield from _subschemas(child, f"{pointer}/{key}/{index}")
    for key in _MAP:
        if isinstance(schema.get(key), dict):
            for name, child in schema[key].items():
                yield from _subschemas(child, f"{pointer}/{key}/{escape_token(name)}")
    if isinstance(schema.get("dependencies"), dict):
        for name, child in schema["dependencies"].items():
            if isinstance(child, bool | dict):
                yield from _subschemas(child, f"{pointer}/dependencies/{escape_token(name)}")


def _can_describe_string(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)


def failures(schema: Any) -> list[tuple[str, str]]:
    """Every (SGLang pointer ``#/...``, reason) ``validate_xgrammar_json_schema`` refuses."""
    out: list[tuple[str, str]] = []
    for node, pointer in _subschemas(schema):
        keywords = sorted(UNSUPPORTED_KEYWORDS.intersection(node))
        if keywords:
            out.append((pointer, f"keyword(s) {', '.join(keywords)} would be ignored"))
        stringy = _can_describe_string(node)
        if stringy and "format" in node:
            name = node["format"]
            if not isinstance(name, str) or name not in XGRAMMAR_FORMATS:
                out.append((pointer, f"string format {name!r} is not implemented"))
        groups = [label for label, keys in _STRING_GROUPS if any(k in node for k in keys)]
        if stringy and len(groups) > 1:
            out.append((pointer, f"constraints {', '.join(groups)} cannot be enforced together"))
    return out


def assess(schema: Any, *, xgrammar_ignores: bool) -> BackendRow:
    """What SGLang (default grammar backend xgrammar) answers for the schema."""
    found = failures(schema)
    if found:
        messages = tuple(
            Message(
                f"HTTP 400: Failed to compile json grammar: JSON Schema at {pointer} is not "
                f"supported by xgrammar: {reason}",
                pointer[1:],
            )
            for pointer, reason in found
        )
        return BackendRow("sglang", RULES_VERSION, Verdict.REFUSES, messages)
    if xgrammar_ignores:
        note = Message(
            "accepted and compiled with xgrammar, which ignores or weakens keywords: "
            "see the xgrammar row"
        )
        return BackendRow("sglang", RULES_VERSION, Verdict.IGNORES, (note,))
    return BackendRow("sglang", RULES_VERSION, Verdict.OK, (Message("accepted"),))
