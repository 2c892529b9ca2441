"""The snippet templates: Jinja2, where every value written must come escaped (:class:`Code`)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from app.export.escape import Code

__all__ = ["render"]

_TEMPLATES = Path(__file__).resolve().parent / "templates"


def _only_code(value: Any) -> Any:
    if not isinstance(value, Code):
        raise TypeError(f"a snippet template was given an unescaped value: {str(value)[:80]!r}")
    return value


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=False,
        finalize=_only_code,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(name: str, **context: Any) -> str:
    """Render the template ``name``; a value that is not :class:`Code` raises TypeError."""
    return _environment().get_template(name).render(**context)
