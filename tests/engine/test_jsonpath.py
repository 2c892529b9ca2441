from __future__ import annotations

import pytest

from app.engine.jsonpath import JsonPosition, advance, format_path


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ([], "$"),
        (["user", "profile", "theme"], "$.user.profile.theme"),
        (["factors", 1, "severity"], "$.factors[1].severity"),
        (["a b"], "$['a b']"),
        (["it's"], "$['it\\'s']"),
        (["1st"], "$['1st']"),
        ([0, 0], "$[0][0]"),
    ],
)
def test_format_path(parts: list[str | int], expected: str) -> None:
    assert format_path(parts) == expected


@pytest.mark.parametrize(
    ("text", "depth", "path"),
    [
        ("", 0, "$"),
        ("{", 1, "$"),
        ('{"us', 1, "$"),
        ('{"user"', 1, "$.user"),
        ('{"user": {"profile": {"settings": {"theme": "da', 4, "$.user.profile.settings.theme"),
        ('{"user": {"profile": {"settings": {"theme": "dark"}}', 2, "$.user.profile"),
        ('{"factors": [', 2, "$.factors[0]"),
        ('{"factors": [{"severity": "low"}, {"severity": "h', 3, "$.factors[1].severity"),
        ('{"factors": [{"a": 1}, {"a": 2}], "b', 1, "$"),
        ('{"a": "x}]{[", "b": 1', 1, "$.b"),
        ('{"a": "say \\"}\\" now", "b', 1, "$"),
        ('{"k\\"q": 1', 1, "$['k\"q']"),
        ('{"ключ": [1, [2, 3', 3, "$['ключ'][1][1]"),
        ("[1, 2, 3]", 0, "$"),
        ('{"a": {}, "b": []}', 0, "$"),
    ],
)
def test_depth_and_path(text: str, depth: int, path: str) -> None:
    position = advance(JsonPosition(), text.encode())
    assert (position.depth, position.path) == (depth, path)


def test_feeding_byte_by_byte_equals_feeding_at_once() -> None:
    text = '{"user": {"ключ": "a\\"b", "list": [1, {"x": "}"}, 3]}, "z": [[]]}'.encode()
    whole = advance(JsonPosition(), text)
    step = JsonPosition()
    for i in range(len(text)):
        step = advance(step, text[i : i + 1])
        assert step == advance(JsonPosition(), text[: i + 1])
    assert step == whole


def test_text_that_is_not_json_never_raises() -> None:
    position = advance(JsonPosition(), b'}}]]],,,::"\\')
    assert position.depth == 0
