"""The editor line a schema keyword comes from: in JSON, where its value is written; in a Pydantic
source, the field (or else the class) the pointer names."""

from __future__ import annotations

import ast
from collections.abc import Callable

from app.engine.jsonpointer import locate
from app.paths import split_pointer
from app.pysource import parse_module

__all__ = ["json_lines", "pydantic_lines"]


def json_lines(source: str) -> Callable[[str], int | None]:
    """Line of a pointer in a JSON source."""

    def line_of(pointer: str) -> int | None:
        found = locate(source, pointer)
        return found[0] if found else None

    return line_of


def _field_names(node: ast.AnnAssign) -> list[str]:
    """A field's name and, when ``Field(alias=...)`` renames it in the schema, its alias."""
    if not isinstance(node.target, ast.Name):
        return []
    names = [node.target.id]
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            for keyword in call.keywords:
                if keyword.arg in ("alias", "serialization_alias") and isinstance(
                    keyword.value, ast.Constant
                ):
                    names.append(str(keyword.value.value))
    return names


def _classes(source: str) -> dict[str, tuple[int, dict[str, int]]]:
    try:
        tree = parse_module(source)
    except SyntaxError:
        return {}
    out: dict[str, tuple[int, dict[str, int]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = {
                name: item.lineno
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                for name in _field_names(item)
            }
            out[node.name] = (node.lineno, fields)
    return out


def pydantic_lines(source: str, root: str) -> Callable[[str], int | None]:
    """Line of a pointer into the schema pydantic derived for the model ``root`` of ``source``.

    ``/properties/name/maxLength`` is the line of the root model's field ``name``;
    ``/$defs/Address/properties/zip/pattern`` the line of ``zip`` in class ``Address``; a pointer
    that names no field gives its class's line, and one that names no class gives None.
    """
    classes = _classes(source)

    def line_of(pointer: str) -> int | None:
        parts = split_pointer(pointer)
        current = root
        line = classes[root][0] if root in classes else None
        index = 0
        while index < len(parts) - 1:
            part, name = parts[index], parts[index + 1]
            if part in ("$defs", "definitions"):
                current = name
                line = classes[name][0] if name in classes else None
                index += 2
            elif part == "properties" and current in classes and name in classes[current][1]:
                line = classes[current][1][name]
                index += 2
            else:
                index += 1
        return line

    return line_of
