"""Jinja filters the templates use to show records: tokens made visible, heat, bytes."""

from __future__ import annotations

import base64

from jinja2 import Environment

__all__ = ["install"]

_VISIBLE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"})


def visible(text: str) -> str:
    """A token's text with whitespace made visible (space ·, newline ↵, tab ⇥)."""
    return text.translate(_VISIBLE) if text else "∅"


def b64(data: bytes) -> str:
    """Base64 of raw bytes."""
    return base64.b64encode(data).decode("ascii")


def pct(value: float, digits: int = 1) -> str:
    """A probability as a percentage."""
    return f"{100 * value:.{digits}f}%"


def hexbytes(data: bytes) -> str:
    """Raw bytes as hex pairs."""
    return " ".join(f"{b:02x}" for b in data)


def install(env: Environment) -> None:
    """Register the filters on a Jinja environment."""
    env.filters.update(visible=visible, b64=b64, pct=pct, hexbytes=hexbytes)
