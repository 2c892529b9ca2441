from __future__ import annotations

import pytest

from app.engine.jsonpointer import line_column, locate, pointer_from_parts, split_pointer

SOURCE = """{
  "type": "object",
  "properties": {
    "a/b": {"type": "string"},
    "list": [1, {"deep": true}]
  }
}"""


def test_pointer_round_trip() -> None:
    parts: list[str | int] = ["properties", "a/b", "x~y", 3]
    pointer = pointer_from_parts(parts)
    assert pointer == "/properties/a~1b/x~0y/3"
    assert split_pointer(pointer) == ["properties", "a/b", "x~y", "3"]
    assert split_pointer("") == []


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", (1, 1)),
        ("/type", (2, 11)),
        ("/properties/a~1b", (4, 12)),
        ("/properties/a~1b/type", (4, 21)),
        ("/properties/list/1/deep", (5, 26)),
        ("/properties/missing", None),
        ("/type/0", None),
    ],
)
def test_locate(pointer: str, expected: tuple[int, int] | None) -> None:
    assert locate(SOURCE, pointer) == expected


def test_locate_in_text_that_is_not_json() -> None:
    assert locate('{"a": nope}', "/a/b") is None


def test_line_column() -> None:
    assert line_column("ab\ncd", 0) == (1, 1)
    assert line_column("ab\ncd", 4) == (2, 2)
