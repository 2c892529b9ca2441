"""app.paths: the one module that writes and reads JSON pointers and JSONPaths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.paths import (
    escape_token,
    format_path,
    parse_path,
    pointer_from_parts,
    split_pointer,
    unescape_token,
)

APP = Path(__file__).resolve().parent.parent / "app"


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        ("a", "a"),
        ("a/b", "a~1b"),
        ("m~n", "m~0n"),
        ("~1", "~01"),  # the ~ first: unescaping ~01 must give back ~1, not /
        ("/~", "~1~0"),
        ("", ""),
        (3, "3"),
    ],
)
def test_a_reference_token_escapes_and_unescapes(token: str | int, escaped: str) -> None:
    assert escape_token(token) == escaped
    assert unescape_token(escaped) == str(token)


@pytest.mark.parametrize(
    ("parts", "pointer"),
    [
        ([], ""),
        (["properties", "a/b"], "/properties/a~1b"),
        (["items", 0, "m~n"], "/items/0/m~0n"),
        ([""], "/"),
        (["$defs", "~1"], "/$defs/~01"),
    ],
)
def test_a_pointer_is_built_and_split(parts: list[str | int], pointer: str) -> None:
    assert pointer_from_parts(parts) == pointer
    assert split_pointer(pointer) == [str(p) for p in parts]


@pytest.mark.parametrize(
    ("parts", "path"),
    [
        ([], "$"),
        (["factors", 1, "severity"], "$.factors[1].severity"),
        (["a b"], "$['a b']"),
        (["it's"], "$['it\\'s']"),
        (["back\\slash"], "$['back\\\\slash']"),
        (["_x9", 0, 12], "$._x9[0][12]"),
        (["9lives"], "$['9lives']"),
    ],
)
def test_a_path_is_formatted_and_parsed(parts: list[str | int], path: str) -> None:
    assert format_path(parts) == path
    assert parse_path(path) == parts


@pytest.mark.parametrize("path", ["factors", "$.", "$[x]", "$['open", "$.a-b"])
def test_a_path_format_path_cannot_write_is_refused(path: str) -> None:
    assert parse_path(path) is None


def test_only_app_paths_escapes_pointer_tokens() -> None:
    # The RFC 6901 escapes as code writes them: a replace of "~" or of "/" by "~1".
    escape = re.compile(r"""replace\(\s*["'](~|/|~0|~1)["']""")
    spelled = [
        str(path.relative_to(APP.parent))
        for path in APP.rglob("*.py")
        if path != APP / "paths.py" and escape.search(path.read_text(encoding="utf-8"))
    ]
    assert spelled == []
