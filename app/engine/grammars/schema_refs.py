"""Every ``$ref`` of a schema resolved statically, before anything validates or compiles it.

A reference whose target is not inside the document (``http:``, ``file:``, a name no ``$id``
defines, a pointer or anchor that is not there) is refused, never fetched: jsonschema resolves
references lazily, so a ``$ref`` behind an ``anyOf`` branch that already passed would never be
looked at by a registry that refuses remote resources. A reference cycle that applies to the same
document without descending into it (``{"allOf": [{"$ref": "#"}]}``) is refused too: validating
it never ends (a RecursionError).

References resolve as JSON Schema does: against the base URI the enclosing ``$id`` sets (``id``
in draft 4 and earlier), to ``#`` (the resource), ``#/json/pointer`` (``~0``, ``~1`` and
%-escapes) or ``#name`` (``$anchor``, ``$dynamicAnchor``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from app.engine.jsonpointer import locate
from app.exceptions import GrammarError
from app.jsontext import json_type
from app.paths import pointer_from_parts, unescape_token

__all__ = ["ReferenceRefused", "check_refs"]

# Where a document without an absolute root $id lives: hierarchical, so that relative refs
# resolve against it, and under a reserved domain (RFC 2606) that names nothing real.
_DOCUMENT_BASE = "https://maskscope.invalid/schema.json"
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Values that are data, not schemas: a "$ref" inside a default is a string like any other.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose value maps names (not keywords) to subschemas.
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
# Applicators whose subschemas apply to the very instance the schema applies to.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")
_OLD_DRAFTS = ("draft-03", "draft-04")

Parts = tuple[str | int, ...]


class ReferenceRefused(GrammarError):
    """A ``$ref`` that points outside the document, to nothing, or loops in place."""


@dataclass
class _Schema:
    """One subschema: where it is, the base URI it resolves against, its references."""

    parts: Parts
    node: dict[str, Any]
    base: str
    refs: list[tuple[str, str]] = field(default_factory=list)  # (keyword, value)


@dataclass
class _Document:
    """What the walk found: every subschema, the resources ($id) and the anchors."""

    schemas: dict[Parts, _Schema] = field(default_factory=dict)
    resources: dict[str, Parts] = field(default_factory=dict)
    anchors: dict[tuple[str, str], Parts] = field(default_factory=dict)
    dynamic: dict[str, list[Parts]] = field(default_factory=dict)
    recursive: list[Parts] = field(default_factory=list)


def check_refs(schema: Any, *, source: str | None = None) -> None:
    """Refuse a schema with a reference that does not stay inside it, or that loops in place.

    Args:
        schema: the parsed JSON Schema.
        source: its JSON text, for the line and column of the offending ``$ref``.

    Raises:
        ReferenceRefused: naming the JSON pointer of the ``$ref`` (and its line and column when
            ``source`` is given); nothing was fetched.
    """
    document = _walk(schema)
    edges: dict[Parts, list[tuple[Parts, Parts | None]]] = {}
    for parts, sub in document.schemas.items():
        out = edges.setdefault(parts, [])
        for keyword, value in sub.refs:
            where = (*parts, keyword)
            out.extend(
                (target, where) for target in _targets(document, sub, keyword, value, source)
            )
        out.extend((child, None) for child in _in_place_children(sub))
    if (looping := _in_place_cycle(edges)) is not None:
        target = document.schemas[looping[:-1]].node[str(looping[-1])]
        raise _refused(
            source,
            looping,
            f"{looping[-1]} {target!r} loops back to a schema it is applied from without "
            "descending into the document: validating it would never end",
        )


def _refused(source: str | None, parts: Parts, message: str) -> ReferenceRefused:
    pointer = pointer_from_parts(parts)
    line, column = (locate(source, pointer) or (None, None)) if source is not None else (None, None)
    return ReferenceRefused(f"{pointer}: {message}", pointer=pointer, line=line, column=column)


def _walk(schema: Any) -> _Document:
    """Every subschema with its base URI; an explicit stack, so nesting cannot overflow."""
    document = _Document()
    old = isinstance(schema, dict) and any(d in str(schema.get("$schema", "")) for d in _OLD_DRAFTS)
    id_keyword = "id" if old else "$id"
    stack: list[tuple[Any, Parts, str]] = [(schema, (), _DOCUMENT_BASE)]
    document.resources[_DOCUMENT_BASE] = ()
    while stack:
        node, parts, base = stack.pop()
        if not isinstance(node, dict):
            continue
        base = _enter(document, node, parts, base, id_keyword)
        sub = _Schema(parts, node, base)
        sub.refs = [(k, node[k]) for k in _REF_KEYWORDS if isinstance(node.get(k), str)]
        document.schemas[parts] = sub
        stack.extend((child, child_parts, base) for child_parts, child in _children(node, parts))
    return document


def _enter(document: _Document, node: dict[str, Any], parts: Parts, base: str, id_kw: str) -> str:
    """Record the resource and anchors ``node`` defines; the base URI inside it."""
    identifier = node.get(id_kw)
    if isinstance(identifier, str):
        resolved, fragment = urldefrag(urljoin(base, identifier))
        if resolved:
            base = resolved
            document.resources.setdefault(base, parts)
        if fragment and id_kw == "id":  # draft 4: "id": "#name" is a plain-name anchor
            document.anchors.setdefault((base, fragment), parts)
    for keyword in ("$anchor", "$dynamicAnchor"):
        if isinstance(name := node.get(keyword), str):
            document.anchors.setdefault((base, name), parts)
    if isinstance(name := node.get("$dynamicAnchor"), str):
        document.dynamic.setdefault(name, []).append(parts)
    if node.get("$recursiveAnchor") is True:
        document.recursive.append(parts)
    return base


def _children(node: dict[str, Any], parts: Parts) -> Iterator[tuple[Parts, Any]]:
    """The subschemas directly inside ``node`` (data keywords skipped; unknown ones walked, so
    a reference cannot hide under a keyword the walk does not know)."""
    for key, value in node.items():
        if key in _DATA_KEYWORDS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                yield (*parts, key, name), sub
        elif isinstance(value, dict):
            yield (*parts, key), value
        elif isinstance(value, list):
            for index, sub in enumerate(value):
                yield (*parts, key, index), sub


def _in_place_children(sub: _Schema) -> Iterator[Parts]:
    node, parts = sub.node, sub.parts
    for keyword in _IN_PLACE_ONE:
        if isinstance(node.get(keyword), dict):
            yield (*parts, keyword)
    for keyword in _IN_PLACE_LISTS:
        if isinstance(value := node.get(keyword), list):
            yield from ((*parts, keyword, i) for i, s in enumerate(value) if isinstance(s, dict))
    for keyword in _IN_PLACE_MAPS:
        if isinstance(value := node.get(keyword), dict):
            yield from ((*parts, keyword, k) for k, s in value.items() if isinstance(s, dict))


def _targets(
    document: _Document, sub: _Schema, keyword: str, value: str, source: str | None
) -> list[Parts]:
    """Where a reference may lead (a dynamic one, to each anchor of its name)."""
    where = (*sub.parts, keyword)
    target = _resolve(document, sub.base, value)
    if isinstance(target, str):
        raise _refused(source, where, f"{keyword} {value!r} is refused: {target}")
    targets = [target]
    if keyword == "$dynamicRef":
        targets += document.dynamic.get(urldefrag(value)[1], [])
    elif keyword == "$recursiveRef":
        targets += document.recursive
    return [t for t in targets if t in document.schemas]


def _resolve(document: _Document, base: str, value: str) -> Parts | str:
    """The target's location in the document, or why there is none."""
    uri, fragment = urldefrag(urljoin(base, value))
    resource = document.resources.get(uri)
    if resource is None:
        return _outside(urljoin(base, value), value)
    fragment = unquote(fragment)
    if fragment and not fragment.startswith("/"):
        anchor = document.anchors.get((uri, fragment))
        if anchor is None:
            return f"no $anchor or $dynamicAnchor {fragment!r} is defined in the document"
        return anchor
    parts: list[str | int] = list(resource)
    node: Any = _at(document, resource)
    for token in fragment.split("/")[1:] if fragment else []:
        token = unescape_token(token)
        if isinstance(node, dict) and token in node:
            node = node[token]
            parts.append(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
            parts.append(int(token))
        else:
            return f"its target {fragment!r} is not in the document"
    if not isinstance(node, dict | bool):
        return f"its target {fragment!r} is not a schema (it is {json_type(node)})"
    return tuple(parts)


def _at(document: _Document, parts: Parts) -> Any:
    return document.schemas[parts].node


def _outside(resolved: str, value: str) -> str:
    scheme = urlsplit(resolved).scheme
    if value.startswith("file:") or scheme == "file":
        return "a file: reference (the server reads no file a schema names)"
    if resolved.startswith(_DOCUMENT_BASE.rsplit("/", 1)[0]):
        return "no $id in the document defines it (only references inside the document resolve)"
    if scheme in ("http", "https", "ftp"):
        return (
            "a remote reference (the server fetches nothing; only references inside the "
            "document resolve)"
        )
    return "its target is not inside the document (only references inside the document resolve)"


def _in_place_cycle(edges: dict[Parts, list[tuple[Parts, Parts | None]]]) -> Parts | None:
    """The first reference of a cycle of in-place applicators, if there is one (iterative DFS)."""
    state: dict[Parts, int] = {}  # 1: on the stack, 2: done
    for start in edges:
        if state.get(start):
            continue
        state[start] = 1
        path: list[Parts | None] = []
        stack = [(start, iter(edges.get(start, [])))]
        while stack:
            node, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[node] = 2
                stack.pop()
                if path:
                    path.pop()
                continue
            child, via = step
            if state.get(child) == 1:
                index = next(i for i, (n, _) in enumerate(stack) if n == child)
                loop = [*path[index:], via]
                return next(ref for ref in loop if ref is not None)
            if not state.get(child):
                state[child] = 1
                path.append(via)
                stack.append((child, iter(edges.get(child, []))))
    return None
