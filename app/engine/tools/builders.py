"""The tools builders by name: xgrammar's (in-process) and vLLM's (its own virtualenv).

The vLLM builder is imported lazily: where ``app.engine.tools.vllm_builder`` is missing, or its
runtime is not installed, it is listed as unavailable with the reason, and a request naming it is
refused with that reason.
"""

from __future__ import annotations

import functools
import importlib

from app.engine.tools.base import BuilderName, ToolFormat, ToolsBuilder
from app.exceptions import GrammarError

__all__ = ["BUILDER_NAMES", "builder", "formats_of", "tool_formats"]

#: Every builder Maskscope names, available or not.
BUILDER_NAMES: tuple[BuilderName, ...] = ("vllm", "xgrammar")


@functools.cache
def _loaded(name: str) -> ToolsBuilder | str:
    """The builder, or the reason it cannot be had (loaded once per process)."""
    if name == "xgrammar":
        from app.engine.tools.xgrammar_builder import XgrammarBuilder

        return XgrammarBuilder()
    if name == "vllm":
        try:
            module = importlib.import_module("app.engine.tools.vllm_builder")
        except ImportError:
            return "not installed"
        found: ToolsBuilder = module.VllmBuilder()
        return found
    return f"unknown builder {name!r}: one of {', '.join(BUILDER_NAMES)}"


def builder(name: str) -> ToolsBuilder:
    """The builder called ``name``.

    Raises:
        GrammarError: no such builder, or it is unavailable here (the reason says why).
    """
    found = _loaded(name)
    if isinstance(found, str):
        if name in BUILDER_NAMES:
            raise GrammarError(f"the {name} builder is unavailable: {found}")
        raise GrammarError(found)
    return found


@functools.cache
def _formats(name: str) -> tuple[ToolFormat, ...]:
    return tuple(builder(name).formats())


def formats_of(name: str) -> tuple[ToolFormat, ...]:
    """The formats builder ``name`` lists (read from its library once per process).

    Raises:
        GrammarError: the builder is unknown or unavailable.
    """
    return _formats(name)


def tool_formats() -> list[ToolFormat]:
    """Every builder's formats; a builder that is unavailable is one row with an empty name,
    ``available: false`` and the reason."""
    rows: list[ToolFormat] = []
    for name in BUILDER_NAMES:
        try:
            rows.extend(formats_of(name))
        except GrammarError as error:
            reason = str(error).removeprefix(f"the {name} builder is unavailable: ")
            rows.append(ToolFormat(name, "", False, None, False, reason))
    return rows
