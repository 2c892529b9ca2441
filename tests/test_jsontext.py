"""The one JSON reader for users' texts: an integer past CPython's 4,300-digit limit is refused
with its pointer, line and column (a source), or read exactly (a document being judged)."""

from __future__ import annotations

import decimal
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

from app.jsontext import IntegerTooLong, LongInt, json_type, loads

LONG = "1" * 5000


def exact() -> int:
    """LONG's value, computed without the limit (a module global would be shown by pytest,
    and ``repr`` of it raises)."""
    return int(decimal.Decimal(LONG))


@pytest.mark.parametrize(
    ("text", "pointer", "line", "column"),
    [
        (LONG, "", 1, 1),
        (f"[1, -{LONG}]", "/1", 1, 5),
        ('{\n  "a/b~": {"x": ' + LONG + "}\n}", "/a~1b~0/x", 2, 17),
        # digits inside a string (escaped quote included) are not a number
        ('{"s": "\\"' + LONG + '", "n": [2.5, ' + LONG + "]}", "/n/1", 1, 9 + 5000 + 15),
        # a fraction or an exponent makes a float, which has no limit: the integer after it
        (f"[{LONG}.5, 1e{LONG}, {LONG}]", "/2", 1, 1 + 5002 + 4 + 5000 + 3),
    ],
)
def test_an_integer_past_the_limit_is_refused_naming_its_pointer_line_and_column(
    text: str, pointer: str, line: int, column: int
) -> None:
    with pytest.raises(IntegerTooLong) as caught:
        loads(text)
    error = caught.value
    assert isinstance(error, json.JSONDecodeError)  # existing `except JSONDecodeError` answer it
    assert error.pointer == pointer
    assert (error.lineno, error.colno) == (line, column)
    assert text[error.pos :].lstrip("-").startswith("1" * 4301)
    assert error.where() == {"line": line, "column": column, "pointer": pointer}
    where = pointer or "the root"
    assert error.msg == f"the integer at {where} has 5000 digits; at most 4300 are read"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (LONG, lambda n: n),
        (f"-{LONG}", lambda n: -n),
        (f'{{"a": [{LONG}, 7]}}', lambda n: {"a": [n, 7]}),
    ],
    ids=["root", "negative", "nested"],
)
def test_a_document_reads_an_integer_of_any_length_exactly(
    text: str, expected: Callable[[int], Any]
) -> None:
    assert loads(text, long_integers=True) == expected(exact())


def test_a_long_integer_has_a_short_repr_where_int_would_raise() -> None:
    value = loads("-" + "12" * 2500, long_integers=True)
    assert isinstance(value, LongInt) and value < 0
    assert repr(value) == str(value) == "-12121212…12121212 (5000 digits)"
    assert f"{value} is too big" == "-12121212…12121212 (5000 digits) is too big"


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5, "x", null, true], "b": {"c": -3}}', "4300" + "0" * 4296, "[]", '"s"'],
)
def test_any_other_text_parses_as_json_loads_does(text: str) -> None:
    assert loads(text) == json.loads(text)


def test_an_integer_a_later_duplicate_key_replaces_is_no_error() -> None:
    assert loads(f'{{"a": {LONG}, "a": 1}}') == {"a": 1}


def test_errors_other_than_the_limit_are_raised_as_before() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        loads(f"[{LONG}, }}")
    assert not isinstance(caught.value, IntegerTooLong)
    assert caught.value.msg == "Expecting value"

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    with pytest.raises(ValueError, match="NaN is not JSON"):
        loads(f"[{LONG}, NaN]", parse_constant=no_constants)


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "a boolean"),
        (3, "an integer"),
        (2.5, "a number"),
        ("s", "a string"),
        ([1], "an array"),
        ({}, "an object"),
    ],
)
def test_json_type_names_json_s_types_never_python_s(value: Any, name: str) -> None:
    assert json_type(value) == name


def test_the_limit_is_python_s_own_whatever_it_is_set_to() -> None:
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the lowest Python allows
    try:
        with pytest.raises(IntegerTooLong, match="has 1000 digits; at most 640 are read"):
            loads("[" + "9" * 1000 + "]")
        assert loads("9" * 1000, long_integers=True) == int(decimal.Decimal("9" * 1000))
    finally:
        sys.set_int_max_str_digits(saved)
