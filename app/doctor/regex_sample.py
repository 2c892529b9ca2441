"""Random strings that match a regular expression, drawn from Python's own parse of it.

JSON Schema's ``pattern`` is searched, not anchored, so a string made of one match is valid.
Look-arounds are not drawn (``Unsupported``): the caller draws another way or gives up.
"""

from __future__ import annotations

import importlib
import random
import re
import string
from typing import Any

__all__ = ["Unsupported", "sample_regex"]

# Python's own regex parser: private modules, which typeshed stopped listing (read as Any).
c: Any = importlib.import_module("re._constants")
sre: Any = importlib.import_module("re._parser")

_ALPHABET = string.ascii_letters + string.digits + " _-.,:/@#"
_CATEGORIES = {
    c.CATEGORY_DIGIT: string.digits,
    c.CATEGORY_NOT_DIGIT: string.ascii_letters + " _-.",
    c.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    c.CATEGORY_NOT_WORD: " -.,:/@#",
    c.CATEGORY_SPACE: " ",
    c.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
}
_OPEN_REPEAT = 4  # extra repetitions drawn beyond the minimum of an unbounded repeat


class Unsupported(ValueError):
    """The pattern uses a construct the sampler does not draw (look-arounds...)."""


def sample_regex(pattern: str, rng: random.Random, *, max_length: int | None = None) -> str:
    """A random string matching ``pattern``.

    Raises:
        Unsupported: the pattern does not parse, or uses a construct the sampler cannot draw.
    """
    try:
        parsed = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise Unsupported(f"the pattern does not parse: {exc}") from None
    groups: dict[int, str] = {}
    out = _draw(list(parsed), rng, groups)
    if max_length is not None and len(out) > max_length:
        raise Unsupported("the match drawn is longer than maxLength")
    return out


def _draw(items: list[tuple[Any, Any]], rng: random.Random, groups: dict[int, str]) -> str:
    return "".join(_one(op, arg, rng, groups) for op, arg in items)


def _one(op: Any, arg: Any, rng: random.Random, groups: dict[int, str]) -> str:
    if op is c.LITERAL:
        return chr(arg)
    if op is c.NOT_LITERAL:
        return rng.choice([ch for ch in _ALPHABET if ord(ch) != arg])
    if op is c.ANY:
        return rng.choice(_ALPHABET)
    if op is c.IN:
        return _in_set(arg, rng)
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
        low, high, body = arg
        top = low + _OPEN_REPEAT if high is c.MAXREPEAT else min(high, low + _OPEN_REPEAT)
        return "".join(_draw(list(body), rng, groups) for _ in range(rng.randint(low, top)))
    if op in (c.SUBPATTERN, getattr(c, "ATOMIC_GROUP", None)):
        group, body = (arg[0], arg[-1]) if op is c.SUBPATTERN else (None, arg)
        text = _draw(list(body), rng, groups)
        if group is not None:
            groups[group] = text
        return text
    if op is c.BRANCH:
        return _draw(list(rng.choice(arg[1])), rng, groups)
    if op is c.GROUPREF:
        return groups.get(arg, "")
    if op is c.AT:
        return ""
    raise Unsupported(f"the pattern uses {op}, which the sampler does not draw")


def _in_set(items: list[tuple[Any, Any]], rng: random.Random) -> str:
    negate = bool(items) and items[0][0] is c.NEGATE
    chars: set[str] = set()
    for op, arg in items[1:] if negate else items:
        if op is c.LITERAL:
            chars.add(chr(arg))
        elif op is c.RANGE:
            low, high = arg
            chars.update(chr(i) for i in range(low, min(high, low + 200) + 1))
        elif op is c.CATEGORY:
            chars.update(_CATEGORIES.get(arg, ""))
        else:
            raise Unsupported(f"the character class uses {op}")
    pool = sorted(set(_ALPHABET) - chars) if negate else sorted(chars)
    if not pool:
        raise Unsupported("the character class matches nothing the sampler draws")
    return rng.choice(pool)
