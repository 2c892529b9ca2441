"""A pointer's line and column: at the keyword's name in JSON, at the field in Pydantic."""

from __future__ import annotations

import pytest

from app.suite.positions import json_positions, locator_for, parent_pointers

SCHEMA = (
    '{"type": "array",\n "items": {"type": "string"},\n'
    '  "uniqueItems": true, "a/b~": [1, {"x": 2}]}'
)


@pytest.mark.parametrize(
    ("pointer", "where"),
    [
        ("", (1, 1)),
        ("/type", (1, 2)),
        ("/items/type", (2, 12)),
        ("/uniqueItems", (3, 3)),
        ("/a~1b~0", (3, 24)),
        ("/a~1b~0/1", (3, 36)),
        ("/a~1b~0/1/x", (3, 37)),
    ],
)
def test_a_pointer_is_where_its_key_is_written(pointer: str, where: tuple[int, int]) -> None:
    assert json_positions(SCHEMA)[pointer] == where


def test_strings_with_escapes_and_non_ascii_keep_columns_in_code_points() -> None:
    text = '{"d\\u00e9": "\\"é\\"", "k": 1}'
    assert json_positions(text)["/k"] == (1, 1 + text.index('"k"'))


def test_broken_json_keeps_what_parsed_before_the_error() -> None:
    positions = json_positions('{"a": 1,\n "b": {"c": ,}}')
    assert positions["/a"] == (1, 2) and positions["/b"] == (2, 2) and "/b/c" in positions


def test_an_unknown_pointer_falls_back_to_its_nearest_parent() -> None:
    assert parent_pointers("/a/b") == ["/a/b", "/a", ""]
    locate = locator_for("json_schema", '{"a":\n  {"b": 1}}')
    assert locate("/a/b/zzz") == (2, 4)


def test_a_pydantic_pointer_is_its_fields_line() -> None:
    source = "from pydantic import BaseModel\n\n\nclass A(BaseModel):\n    name: str\n    n: int\n"
    locate = locator_for("pydantic", source, pydantic_root="A")
    assert locate("/properties/n/maximum") == (6, 5)
    assert locate("/properties/name") == (5, 5)
