"""JSONPath formatting, shared by the engine and the sandbox (which must not import torch)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["format_path"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
