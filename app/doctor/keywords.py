"""The constraint keywords of a JSON Schema, where they are, and where a validator's path leads.

Only subschemas reachable from the root count (through the applicators and local ``$ref``s): a
keyword in an unused ``$defs`` entry constrains nothing, so it is neither probed nor reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.paths import pointer_from_parts, split_pointer

__all__ = [
    "CONSTRAINT_KEYWORDS",
    "Keyword",
    "constraint_keywords",
    "error_pointer",
    "resolve_ref",
    "subschemas",
]

#: Keywords that constrain instances (JSON Schema 2020-12 validation and applicators, and the
#: draft-07 forms pydantic and older schemas still write). Annotations (title, description,
#: default, examples...) are left out: they constrain nothing.
CONSTRAINT_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "format",
        "items",
        "prefixItems",
        "additionalItems",
        "unevaluatedItems",
        "contains",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "properties",
        "patternProperties",
        "additionalProperties",
        "unevaluatedProperties",
        "propertyNames",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "$ref",
    }
)

_ONE_SUBSCHEMA = (
    "additionalProperties",
    "additionalItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
_LIST_OF_SUBSCHEMAS = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP_OF_SUBSCHEMAS = ("properties", "patternProperties", "dependentSchemas", "dependencies")


@dataclass(frozen=True)
class Keyword:
    """One constraint keyword in the schema.

    Attributes:
        pointer: JSON pointer of the keyword itself, e.g. ``/properties/tags/uniqueItems``.
        keyword: its name.
        value: its value in the schema.
        node: the subschema that holds it (its siblings are the other keys).
    """

    pointer: str
    keyword: str
    value: Any
    node: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def resolve_ref(root: Any, ref: str) -> tuple[list[str], Any] | None:
    """The target of a local ``$ref`` (``#`` or ``#/...``) and its path; None when not local."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    if ref != "#" and not ref.startswith("#/"):
        # "#name" is a plain-name fragment (an $anchor), not a pointer: read as a pointer it
        # would name the root itself, and following it would never end.
        return _anchor(root, ref[1:])
    parts = split_pointer(ref[1:])
    node = root
    try:
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return parts, node


def _anchor(root: Any, name: str) -> tuple[list[str], Any] | None:
    """The subschema declaring ``"$anchor": name`` (or ``$dynamicAnchor``) and its path."""
    stack: list[tuple[list[str], Any]] = [([], root)]
    while stack:
        parts, node = stack.pop()
        if isinstance(node, dict):
            if name in (node.get("$anchor"), node.get("$dynamicAnchor")):
                return parts, node
            stack.extend((parts + [str(k)], v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((parts + [str(i)], v) for i, v in reversed(list(enumerate(node))))
    return None


def _children(node: dict[str, Any]) -> Iterator[tuple[list[str | int], Any]]:
    for key in _ONE_SUBSCHEMA:
        if key in node:
            yield [key], node[key]
    items = node.get("items")
    if isinstance(items, list):
        for index, child in enumerate(items):
            yield ["items", index], child
    elif items is not None:
        yield ["items"], items
    for key in _LIST_OF_SUBSCHEMAS:
        if isinstance(node.get(key), list):
            for index, child in enumerate(node[key]):
                yield [key, index], child
    for key in _MAP_OF_SUBSCHEMAS:
        if isinstance(node.get(key), dict):
            for name, child in node[key].items():
                yield [key, name], child


def subschemas(root: Any) -> Iterator[tuple[list[str | int], dict[str, Any]]]:
    """Every object subschema reachable from the root, once each, with its path."""
    seen: set[str] = set()
    stack: list[tuple[list[str | int], Any]] = [([], root)]
    while stack:
        parts, node = stack.pop()
        pointer = pointer_from_parts(parts)
        if not isinstance(node, dict) or pointer in seen:
            continue
        seen.add(pointer)
        yield parts, node
        pending = [(parts + relative, child) for relative, child in _children(node)]
        target = resolve_ref(root, node["$ref"]) if "$ref" in node else None
        if target is not None:
            pending.append((list(target[0]), target[1]))
        stack.extend(reversed(pending))


def _negated(parts: list[str | int]) -> bool:
    """Whether a subschema lies inside a ``not``: its keywords are what the user forbade with
    ``not``, constraining nothing themselves (the row is ``not``'s)."""
    names = _MAP_OF_SUBSCHEMAS + ("$defs", "definitions")
    index = 0
    while index < len(parts):
        if parts[index] == "not":
            return True
        index += 2 if parts[index] in names or parts[index] in _LIST_OF_SUBSCHEMAS else 1
    return False


def constraint_keywords(root: Any) -> list[Keyword]:
    """The constraint keywords of every reachable subschema, in document order (those inside a
    ``not`` are that keyword's: they have no row of their own)."""
    found = [
        Keyword(pointer_from_parts([*parts, key]), key, value, node)
        for parts, node in subschemas(root)
        if not _negated(parts)
        for key, value in node.items()
        if key in CONSTRAINT_KEYWORDS
    ]
    order = {pointer: i for i, pointer in enumerate(_document_order(root))}
    return sorted(found, key=lambda k: order.get(k.pointer, len(order)))


def _document_order(node: Any, parts: tuple[str | int, ...] = ()) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield pointer_from_parts((*parts, key))
            yield from _document_order(value, (*parts, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _document_order(value, (*parts, index))


def error_pointer(root: Any, schema_path: Iterable[str | int]) -> str:
    """The JSON pointer of the keyword a validator's ``absolute_schema_path`` ends on.

    jsonschema's path continues inside a referenced schema as if it were written in place (and
    older versions name the ``$ref`` on the way); this follows the reference, so the pointer
    names the keyword where it is written.
    """
    parts: list[str | int] = []
    node = root
    for part in schema_path:
        followed: set[int] = set()
        while isinstance(node, dict) and part not in node and isinstance(node.get("$ref"), str):
            target = resolve_ref(root, node["$ref"])
            if target is None or id(target[1]) in followed:
                break  # a reference to itself, or a loop of references, leads nowhere
            followed.add(id(target[1]))
            parts, node = list(target[0]), target[1]
        if part == "$ref":
            continue
        parts.append(part)
        node = _child(node, part)
    return pointer_from_parts(parts)


def _child(node: Any, part: str | int) -> Any:
    try:
        return node[int(part)] if isinstance(node, list) else node[part]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
