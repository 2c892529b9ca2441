"""mkdocs hooks for Maskscope's docs site (``hooks:`` in mkdocs.yml).

- The configuration page's tables are generated from ``app.settings.Settings`` at build time:
  ``<!-- settings:NAME -->`` in a page becomes the table of that class's fields (name,
  environment variable, type, default, description), so the page can never list a setting
  that does not exist or miss one that does.
- A page longer than ``MAX_LINES`` source lines is a warning, which ``mkdocs build --strict``
  turns into a failed build.
"""

from __future__ import annotations

import inspect
import logging
import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from app import settings as settings_module

__all__ = ["MAX_LINES", "descriptions", "on_page_markdown", "render", "rows"]

#: The longest a docs page may be, in source lines.
MAX_LINES = 400

#: The classes a ``<!-- settings:NAME -->`` marker may name, and the prefix of their variables.
CLASSES: dict[str, tuple[type[BaseModel], str | None]] = {
    "Settings": (settings_module.Settings, "MASKSCOPE_"),
    "RemoteEngineSpec": (settings_module.RemoteEngineSpec, None),
    "TokenizerSpec": (settings_module.TokenizerSpec, None),
}

# A pipe not escaped yet, outside code: in a table cell it would end the cell (Python-Markdown
# keeps a pipe inside a code span, and would show an escape there as written).
PIPE = re.compile(r"(?<!\\)\|")
CODE = re.compile(r"(`[^`]*`)")
MARKER = re.compile(r"^<!-- settings:(\w+) -->$", flags=re.MULTILINE)
ROOT = Path(settings_module.__file__).resolve().parent.parent

log = logging.getLogger("mkdocs.hooks.maskscope")


def descriptions(cls: type[BaseModel]) -> dict[str, str]:
    """Each field's description: its ``description=``, else its entry in the class docstring's
    Google-style ``Attributes:`` section, RST double backticks made Markdown ones.

    Args:
        cls: a pydantic model or settings class.

    Returns:
        The description of every field that has one, by field name.
    """
    found: dict[str, str] = {}
    doc = inspect.cleandoc(cls.__doc__ or "")
    section = doc.partition("Attributes:\n")[2]
    name = None
    for line in section.splitlines():
        entry = re.match(r"^    (\w+)(?: \([^)]*\))?: (.*)$", line)
        if entry:
            name = entry.group(1)
            found[name] = entry.group(2)
        elif name and line.startswith("        "):
            found[name] += " " + line.strip()
        elif line.strip():
            break
    for field, info in cls.model_fields.items():
        if info.description:
            found[field] = info.description
    return {key: value.replace("``", "`") for key, value in found.items()}


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(arg) if arg is not type(None) else "unset" for arg in args)
    if origin is list:
        return f"JSON list of {_type(args[0])}"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation)


def _bounds(info: FieldInfo) -> str:
    words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    parts = []
    for item in info.metadata:
        for attr, sign in words.items():
            if getattr(item, attr, None) is not None:
                parts.append(f"{sign} {getattr(item, attr)}")
        if getattr(item, "pattern", None):
            parts.append(f"matching `{item.pattern}`")
    return f" ({', '.join(parts)})" if parts else ""


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "unset"
    if isinstance(value, Path):
        text = str(value).replace(str(ROOT), "<checkout>").replace(str(Path.home()), "~")
        return f"`{text}`"
    if value == []:
        return "`[]`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def rows(cls: type[BaseModel], prefix: str | None) -> list[tuple[str, str, str, str]]:
    """One row per field: its name (as an environment variable when ``prefix`` is given), its
    type with its bounds, its default and its description.

    Args:
        cls: a pydantic model or settings class.
        prefix: the environment variables' prefix (``MASKSCOPE_``), or None for a JSON entry.

    Returns:
        The rows, in the class's field order.
    """
    text = descriptions(cls)
    out = []
    for field, info in cls.model_fields.items():
        name = f"{prefix}{field.upper()}" if prefix else field
        kind = _type(info.annotation) + _bounds(info)
        out.append((f"`{name}`", kind, _default(info), text.get(field, "")))
    return out


def _cell(text: str) -> str:
    parts = CODE.split(text)
    return "".join(p if p.startswith("`") else PIPE.sub(r"\\|", p) for p in parts)


def render(name: str) -> str:
    """The Markdown table of one class of ``CLASSES``.

    Args:
        name: a key of ``CLASSES``.

    Returns:
        The table, a header row first.
    """
    cls, prefix = CLASSES[name]
    first = "variable" if prefix else "key"
    lines = [f"| {first} | type | default | what it does |", "|---|---|---|---|"]
    for cells in rows(cls, prefix):
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """mkdocs hook: fill the settings markers, and warn about a page over ``MAX_LINES``."""
    source = Path(page.file.abs_src_path).read_text(encoding="utf-8")
    count = len(source.splitlines())
    if count > MAX_LINES:
        log.warning(
            "%s is %d lines, over the %d a page may have", page.file.src_uri, count, MAX_LINES
        )
    return MARKER.sub(lambda found: render(found.group(1)), markdown)
