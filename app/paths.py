"""Locations in a JSON document, spelled one way: JSON pointers (RFC 6901) and JSONPaths.

Every module that escapes a pointer's reference token, builds or splits a pointer, or formats or
parses a JSONPath does it here. Shared by the engine, the doctor, the web layer and the sandbox
(which must not import torch), so this module imports nothing of the app's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "escape_token",
    "format_path",
    "parse_path",
    "pointer_from_parts",
    "split_pointer",
    "unescape_token",
]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]")


def escape_token(token: str | int) -> str:
    """One reference token of a JSON pointer: ``~`` as ``~0``, ``/`` as ``~1``.

    Args:
        token: an object key, or an array index.

    Returns:
        The token as it is written in a pointer, e.g. ``a/b`` -> ``a~1b``.
    """
    return str(token).replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    """The key a pointer's reference token names: ``~1`` as ``/``, then ``~0`` as ``~``."""
    return token.replace("~1", "/").replace("~0", "~")


def pointer_from_parts(parts: Iterable[str | int]) -> str:
    """Build a JSON pointer, e.g. ``["properties", "a/b"]`` -> ``/properties/a~1b``."""
    return "".join("/" + escape_token(p) for p in parts)


def split_pointer(pointer: str) -> list[str]:
    """Split a JSON pointer into its unescaped reference tokens (``""`` -> ``[]``)."""
    if not pointer:
        return []
    return [unescape_token(p) for p in pointer.split("/")[1:]]


def format_path(parts: Iterable[str | int]) -> str:
    """Format path parts as a JSONPath, e.g. ``$.factors[1].severity`` or ``$['a b']``.

    Args:
        parts: object keys (str) and array indices (int), outermost first.

    Returns:
        The path, ``$`` for the document root.
    """
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.match(part):
            out.append(f".{part}")
        else:
            escaped = part.replace("\\", "\\\\").replace("'", "\\'")
            out.append(f"['{escaped}']")
    return "".join(out)


def parse_path(path: str) -> list[str | int] | None:
    """The parts of a JSONPath as :func:`format_path` writes it (its inverse).

    Args:
        path: e.g. ``$.factors[1]['a b']``.

    Returns:
        Object keys (str) and array indices (int), outermost first; None when ``path`` is not a
        path :func:`format_path` could have written.
    """
    if not path.startswith("$"):
        return None
    parts: list[str | int] = []
    rest = path[1:]
    while rest:
        match = _PATH_PART.match(rest)
        if match is None:
            return None
        key, index, quoted = match.groups()
        if index is not None:
            parts.append(int(index))
        else:
            parts.append(key if key is not None else re.sub(r"\\(.)", r"\1", quoted))
        rest = rest[match.end() :]
    return parts
