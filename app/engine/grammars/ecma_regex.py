"""ECMA-262 patterns (the dialect JSON Schema names) run on RE2, in time linear in the text.

Python's ``re`` backtracks: ``"^(a+)+$"`` against 28 ``a`` and a ``!`` takes 20 s, each ``a``
doubling it. Each pattern is translated to RE2's syntax with ECMA-262's meaning (``\\uXXXX``,
the ``.`` and ``\\s`` of ECMA-262...), compiled once (cached) and searched for, not matched.

RE2 cannot run backreferences or lookaround (no linear-time engine can): such a pattern has no
compiled form, and :func:`regex_problem` says why.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2

__all__ = ["ecma_to_re2", "regex_problem", "regex_search"]

# RE2 bounds each pattern's memory (program and DFA cache: past it, the DFA gives way to a
# slower but still linear search); the cache bounds how many are kept: 128 x 2 MiB at most.
_CACHED_PATTERNS = 128
_PATTERN_MAX_MEM = 2 << 20
_ECMA_SPACE = (
    r"\t\n\x{0B}\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
    r"\x{FEFF}"
)
_ECMA_DOT = r"[^\n\r\x{2028}\x{2029}]"
_UNICODE_ESCAPE = re.compile(r"u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})")
_BACKREFERENCE = re.compile(r"invalid escape sequence: \\[1-9k]")
_LOOKAROUND = re.compile(r"invalid perl operator: \(\?<?[=!]")


def ecma_to_re2(pattern: str) -> str:
    """Translate an ECMA-262 pattern into RE2 syntax with the same meaning.

    ``\\uXXXX``, ``\\u{X}``, ``\\cX`` and ``\\0`` become ``\\x{...}``; ``.`` and ``\\s``/``\\S``
    get ECMA-262's line terminators and white space; ``[^]`` and ``[]`` (anything, nothing) and
    ``\\b`` in a class (a backspace) get RE2 equivalents; ``(?<name>`` becomes ``(?P<name>``.
    What RE2 lacks (backreferences, lookaround) is left for RE2 to refuse.
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            text, i = _escape(pattern, i, in_class)
            out.append(text)
        elif in_class:
            in_class = char != "]"
            out.append(char)
            i += 1
        elif pattern.startswith("[^]", i):
            out.append(r"[\x{0}-\x{10FFFF}]")
            i += 3
        elif pattern.startswith("[]", i):
            out.append(r"[^\x{0}-\x{10FFFF}]")
            i += 2
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
        else:
            in_class = char == "["
            out.append(_ECMA_DOT if char == "." else char)
            i += 1
    return "".join(out)


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The RE2 form of the escape at ``pattern[i]`` and the offset after it."""
    letter = pattern[i + 1]
    if letter == "u" and (match := _UNICODE_ESCAPE.match(pattern, i + 1)):
        code, end = int(match[1] or match[2], 16), match.end()
        low = _UNICODE_ESCAPE.match(pattern, end + 1) if pattern.startswith("\\u", end) else None
        if 0xD800 <= code < 0xDC00 and low and low[2] and 0xDC00 <= int(low[2], 16) < 0xE000:
            # a surrogate pair written as two escapes is one character (ECMA counts UTF-16)
            code = 0x10000 + ((code - 0xD800) << 10) + (int(low[2], 16) - 0xDC00)
            end = low.end()
        return f"\\x{{{code:X}}}", end
    following = pattern[i + 2] if i + 2 < len(pattern) else ""
    if letter == "c" and following.isascii() and following.isalpha():
        return f"\\x{{{ord(following) % 32:X}}}", i + 3
    if letter == "0" and not following.isdigit():
        return r"\x{0}", i + 2
    if letter == "s":
        return (_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]"), i + 2
    if letter == "S" and not in_class:
        return f"[^{_ECMA_SPACE}]", i + 2
    if letter == "b" and in_class:
        return r"\x{8}", i + 2
    return pattern[i : i + 2], i + 2


@functools.lru_cache(maxsize=_CACHED_PATTERNS)
def _compiled(pattern: str) -> tuple[Any, str | None]:
    """The compiled pattern, or None and why RE2 cannot run it."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _PATTERN_MAX_MEM
    try:
        return re2.compile(ecma_to_re2(pattern), options), None
    except re2.error as error:
        detail = error.args[0] if error.args else error
        reason = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
    if _BACKREFERENCE.search(reason):
        why = "it uses a backreference"
    elif _LOOKAROUND.search(reason):
        why = "it uses lookaround"
    else:
        return None, f"RE2 refuses it ({reason})"
    return None, f"{why}, which needs a backtracking engine; the server runs none on user input"


def regex_problem(pattern: str) -> str | None:
    """Why the server cannot run ``pattern`` (an ECMA-262 regex), or None when it can."""
    return _compiled(pattern)[1]


def regex_search(pattern: str, text: str) -> bool | None:
    """Whether ``pattern`` matches somewhere in ``text`` (in linear time); None when the pattern
    cannot be run (see :func:`regex_problem`)."""
    compiled, _ = _compiled(pattern)
    if compiled is None:
        return None
    try:
        return compiled.search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): not UTF-8, so not for RE2
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return compiled.search(text) is not None
