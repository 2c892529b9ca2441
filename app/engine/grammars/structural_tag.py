"""Structural tags (xgrammar's ``StructuralTag`` JSON): parse, validate, locate errors.

xgrammar's ``InvalidStructuralTagError`` names no location, so a tag is validated here first with
xgrammar's own Pydantic models, and pydantic's ``loc`` becomes a JSON pointer into the source.
The leaves that hold their own language (``json_schema``, ``regex``, ``grammar``) are listed so
that the compile worker can compile each alone when the whole tag fails, to place the error.
A legacy ``{"structures", "triggers"}`` tag is converted with
``StructuralTag.from_legacy_structural_tag``; its errors point into the legacy form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import pydantic
from xgrammar.structural_tag import StructuralTag, StructuralTagItem

from app.engine.grammars.jsonschema_safe import error_list, meta_validator
from app.engine.jsonpointer import locate
from app.exceptions import GrammarError
from app.jsontext import IntegerTooLong, json_type, loads
from app.paths import pointer_from_parts

__all__ = ["TAG_NOT_CARRIED", "Leaf", "ParsedTag", "json_object", "parse_tag", "tag_error"]

#: The compile options a structural tag does not take: ``compile_structural_tag`` has no
#: options (its ``json_schema`` leaves carry their own ``style``, ``any_order``,
#: ``max_whitespace_cnt``), so every request option and the preset are ignored for a tag.
TAG_NOT_CARRIED = (
    "preset",
    "any_whitespace",
    "strict_mode",
    "indent",
    "separators",
    "max_whitespace_cnt",
)

_LEAF_FIELDS = {"json_schema": "json_schema", "qwen_xml_parameter": "json_schema",
                "regex": "pattern", "grammar": "grammar"}  # fmt: skip


@dataclass(frozen=True)
class Leaf:
    """A part of the tag written in another language, compiled alone to place an error.

    Attributes:
        parts: the path to the leaf's field in the source (e.g. ``["format", "content",
            "pattern"]``).
        kind: ``json_schema``, ``regex`` or ``grammar``.
        value: the schema (parsed), the regex, or the grammar text.
        syntax: for a ``grammar`` leaf, ``ebnf`` or ``lark``.
        inside: whether a pointer may go inside the value (not for a legacy schema given as a
            string).
    """

    parts: tuple[str | int, ...]
    kind: Literal["json_schema", "regex", "grammar"]
    value: Any
    syntax: str = "ebnf"
    inside: bool = True


@dataclass(frozen=True)
class ParsedTag:
    """A validated structural tag.

    Attributes:
        tag_json: the tag in xgrammar's current form (a legacy tag converted), as JSON.
        legacy: whether the source was a legacy ``{"structures", "triggers"}`` tag.
        leaves: the leaves, located in the source.
    """

    tag_json: str
    legacy: bool
    leaves: tuple[Leaf, ...]


class _LegacyTag(pydantic.BaseModel):
    type: Literal["structural_tag"] = "structural_tag"
    structures: list[StructuralTagItem]
    triggers: list[str]


def tag_error(
    source: str, parts: list[str | int] | tuple[str | int, ...], message: str
) -> GrammarError:
    """A :class:`GrammarError` at ``parts`` of the tag ``source``, with line and column."""
    pointer = pointer_from_parts(parts)
    line, column = locate(source, pointer) or (None, None)
    return GrammarError(message, pointer=pointer, line=line, column=column)


def json_object(source: str, what: str) -> dict[str, Any]:
    """``source`` parsed as a JSON object (a structural tag, a tools source: ``what``).

    Raises:
        GrammarError: not JSON (with its line and column), nested too deeply, or not an object.
    """
    try:
        data = loads(source)
    except IntegerTooLong as exc:
        raise GrammarError(exc.msg, **exc.where()) from None
    except json.JSONDecodeError as exc:
        raise GrammarError(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise GrammarError(f"invalid {what}: nested too deeply to parse") from None
    if not isinstance(data, dict):
        raise GrammarError(f"a {what} is a JSON object, not {json_type(data)}", line=1, column=1)
    return data


def parse_tag(source: str) -> ParsedTag:
    """Parse and validate a structural tag (current or legacy form).

    Raises:
        GrammarError: not JSON, not an object, not a valid structural tag (with the pointer
            pydantic's location names), or a ``json_schema`` leaf that is not a valid JSON
            Schema (pointed to inside the leaf).
    """
    data = json_object(source, "structural tag")
    if "format" not in data and ("structures" in data or "triggers" in data):
        parsed = _legacy(source, data)
    else:
        _validate(source, data, StructuralTag)
        parsed = ParsedTag(json.dumps(data), False, tuple(_leaves(data, [])))
    for leaf in parsed.leaves:
        if leaf.kind == "json_schema":
            _check_schema(source, leaf)
    return parsed


def _legacy(source: str, data: dict[str, Any]) -> ParsedTag:
    model = _validate(source, data, _LegacyTag)
    leaves = []
    for index, item in enumerate(model.structures):
        schema, inside = item.schema_, True
        if isinstance(schema, str):
            inside = False
            try:
                schema = loads(schema)
            except json.JSONDecodeError as exc:
                raise tag_error(
                    source,
                    ["structures", index, "schema"],
                    f"the schema is a string that is not JSON: {exc.msg} (column {exc.colno})",
                ) from None
        leaves.append(Leaf(("structures", index, "schema"), "json_schema", schema, inside=inside))
    try:
        tag = StructuralTag.from_legacy_structural_tag(model.structures, model.triggers)
    except pydantic.ValidationError as exc:  # a schema that is neither an object nor a boolean
        where = _first_index(exc)
        raise tag_error(
            source, ["structures", where, "schema"], _messages(exc.errors()[:1])
        ) from None
    return ParsedTag(tag.model_dump_json(indent=None), True, tuple(leaves))


def _first_index(exc: pydantic.ValidationError) -> int:
    for item in exc.errors()[0]["loc"]:
        if isinstance(item, int):
            return item
    return 0


def _validate(source: str, data: dict[str, Any], model: type[pydantic.BaseModel]) -> Any:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors()
        located = [(_source_parts(data, error["loc"]), error) for error in errors]
        parts = located[0][0]
        same = [error for where, error in located if where == parts]
        raise tag_error(source, parts, _messages(same)) from None


def _messages(errors: list[Any]) -> str:
    details: list[str] = []
    for error in errors:
        detail = (
            f"missing field {error['loc'][-1]!r}" if error["type"] == "missing" else error["msg"]
        )
        if detail not in details:
            details.append(detail)
    return "not a valid structural tag: " + "; or ".join(details)


def _source_parts(data: Any, loc: tuple[str | int, ...]) -> list[str | int]:
    """The path in ``data`` that pydantic's ``loc`` names, without the names pydantic inserts.

    A discriminated union adds the member's tag right after the field that holds it (``content``,
    ``tag``, ``pattern`` for a regex content); a plain union adds the member type's name
    (``str``, ``list[str]``, ``TokenFormat``). Only the steps that exist in the data are kept.
    """
    parts: list[str | int] = []
    node, tag_dropped = data, False
    for item in loc:
        if isinstance(node, dict):
            if not tag_dropped and item == node.get("type"):
                tag_dropped = True  # the tag comes before a key of the same name (json_schema)
            elif isinstance(item, str) and item in node:
                parts.append(item)
                node, tag_dropped = node[item], False
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            parts.append(item)
            node, tag_dropped = node[item], False
    return parts


def _leaves(node: Any, parts: list[str | int]) -> list[Leaf]:
    found: list[Leaf] = []
    if isinstance(node, dict):
        field = _LEAF_FIELDS.get(node.get("type"))  # type: ignore[arg-type]
        if field is not None and field in node:
            kind: Any = "json_schema" if field == "json_schema" else node["type"]
            syntax = str(node.get("syntax", "ebnf"))
            found.append(Leaf((*parts, field), kind, node[field], syntax=syntax))
        for key, value in node.items():
            if key != field:
                found.extend(_leaves(value, [*parts, key]))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_leaves(value, [*parts, index]))
    return found


def _check_schema(source: str, leaf: Leaf) -> None:
    error = jsonschema.exceptions.best_match(error_list(meta_validator(leaf.value), leaf.value))
    if error is not None:
        inner = list(error.absolute_path) if leaf.inside else []
        raise tag_error(source, [*leaf.parts, *inner], f"not a valid JSON Schema: {error.message}")
