"""Values written into code: Python literals, shell words, comments. Nothing else reaches a snippet.

Every function returns :class:`Code`; the template environment refuses any other value, so a value
that skipped escaping is an error at render time, not an injection in a user's program.
"""

from __future__ import annotations

import json
import math
import shlex
import textwrap
from typing import Any

__all__ = ["Code", "comment", "identifier", "one_line", "py", "py_str", "sh", "sh_json"]

_WIDTH = 96
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class Code(str):
    """Text that is already valid in the target language."""

    __slots__ = ()


def _char(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch.isprintable():
        return ch
    # Control characters and Unicode line separators would end a line in an editor.
    point = ord(ch)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def py_str(text: str) -> Code:
    """A Python string literal equal to ``text``: double quotes, single when that escapes less."""
    quote = "'" if '"' in text and "'" not in text else '"'
    body = "".join(_char(ch) for ch in text)
    if quote == "'":
        body = body.replace('\\"', '"')  # _char escaped double quotes; single ones need none here
    return Code(quote + body + quote)


def _py_multiline(text: str, indent: int) -> str:
    """A long text with newlines as implicitly concatenated literals, one line of it a line."""
    pad = " " * (indent + 4)
    pieces = [py_str(line) for line in text.splitlines(keepends=True)]
    return "(\n" + "".join(f"{pad}{piece}\n" for piece in pieces) + " " * indent + ")"


def _py(value: Any, indent: int, names: dict[int, str], lead: int = 0) -> str:
    """``lead``: how many characters precede the value on its first line (a key, a name)."""
    if id(value) in names:
        return names[id(value)]
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, str):
        if "\n" in value.rstrip("\n") and len(value) > 60:
            return _py_multiline(value, indent)
        return py_str(value)
    if isinstance(value, tuple) and value:
        return "(" + ", ".join(_py(v, indent, names) for v in value) + "," * (len(value) == 1) + ")"
    if isinstance(value, dict):
        keys = [py_str(str(k)) for k in value]
        items = [
            f"{k}: {_py(v, indent + 4, names, len(k) + 2)}"
            for k, v in zip(keys, value.values(), strict=True)
        ]
        return _fit(items, "{", "}", indent, lead)
    if isinstance(value, list):
        return _fit([_py(v, indent + 4, names) for v in value], "[", "]", indent, lead)
    raise TypeError(f"no Python literal for {type(value).__name__}")


def _fit(items: list[str], open_: str, close: str, indent: int, lead: int) -> str:
    """The items on one line when they fit, else one a line."""
    if not items:
        return open_ + close
    flat = open_ + ", ".join(items) + close
    if "\n" not in flat and indent + lead + len(flat) < _WIDTH - 4:
        return flat
    pad = " " * (indent + 4)
    return open_ + "\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + close


def py(value: Any, indent: int = 0, names: dict[int, Code] | None = None, lead: int = 0) -> Code:
    """A Python literal equal to a JSON-like value, laid out to be read.

    Args:
        value: None, bool, int, float, str, list or dict of those (a tuple, short, stays one).
        indent: the column the literal starts at, for the lines after its first.
        names: code to write instead of a value, by the value's ``id`` (a constant's name for an
            object the snippet defines once, e.g. ``SCHEMA``).
        lead: the characters before the literal on its first line (``SCHEMA = ``).
    """
    return Code(_py(value, indent, dict(names or {}), lead))


def sh(word: str) -> Code:
    """One shell word, quoted so that the shell passes exactly ``word``."""
    return Code(shlex.quote(word))


def sh_json(value: Any) -> Code:
    """A JSON document as one single-quoted shell word (readable: indented, UTF-8 as is).

    Characters that would not show are ``\\u`` escapes: JSON escapes only those below U+0020,
    and DEL, C1 controls, bidirectional controls or line separators would reach the terminal as
    they are (DEL erases the character before it when pasted without bracketed paste).
    """
    text = json.dumps(value, indent=2, ensure_ascii=False)
    shown = (ch if ch.isprintable() or ch == "\n" else json.dumps(ch)[1:-1] for ch in text)
    return sh("".join(shown))


def one_line(text: str) -> str:
    """``text`` with its line breaks and other unprintable characters escaped, to sit inside a
    sentence of a comment: a user's line break would otherwise give it lines of its own (a
    ``$ command`` line that looks like Maskscope's own advice)."""
    return "".join(ch if ch.isprintable() else _char(ch) for ch in text)


def _no_command_start(lines: list[str]) -> list[str]:
    """Wrapped lines, none but the first starting with ``$``: it would read as a command to copy
    (``# $ ...``), so such a line takes the last words of the line before it."""
    out: list[str] = []
    for line in lines:
        while out and line.startswith("$") and " " in out[-1]:
            head, word = out[-1].rsplit(" ", 1)
            out[-1], line = head, f"{word} {line}"
        out.append(line)
    return out


def comment(text: str, prefix: str = "# ") -> Code:
    """``text`` as comment lines; nothing in it can end the comment early."""
    safe = "".join(ch if ch == "\n" or ch.isprintable() else _char(ch) for ch in text)
    lines: list[str] = []
    for paragraph in safe.split("\n"):
        if paragraph.startswith("$ "):  # a command stays on one line, to be copied whole
            lines.append(paragraph)
            continue
        wrapped = textwrap.wrap(
            paragraph, _WIDTH - len(prefix), break_on_hyphens=False, break_long_words=False
        )
        lines.extend(_no_command_start(wrapped) or [""])
    return Code("\n".join((prefix + line).rstrip() for line in lines))


def identifier(name: str) -> Code:
    """A Python identifier, checked (a model name from a Pydantic source)."""
    if not name.isidentifier() or not name.isascii():
        raise ValueError(f"not a Python identifier: {name!r}")
    return Code(name)
