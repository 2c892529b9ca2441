"""The tools builders by name: xgrammar's (in-process) and vLLM's (its own virtualenv).

The vLLM builder is imported lazily: where ``app.engine.grammars.tools.vllm_builder`` is missing,
or its
runtime is not installed, it is listed as unavailable with the reason, and a request naming it is
refused with that reason.
"""

from __future__ import annotations

import functools
import importlib
import threading

from app.engine.grammars.tools.base import BuilderName, ToolFormat, ToolsBuilder
from app.exceptions import GrammarError

__all__ = ["BUILDER_NAMES", "builder", "formats_for", "formats_of", "tool_formats"]

#: Every builder Maskscope names, available or not.
BUILDER_NAMES: tuple[BuilderName, ...] = ("vllm", "xgrammar")


@functools.cache
def _loaded(name: str) -> ToolsBuilder | str:
    """The builder, or the reason it cannot be had (loaded once per process)."""
    if name == "xgrammar":
        from app.engine.grammars.tools.xgrammar_builder import XgrammarBuilder

        return XgrammarBuilder()
    if name == "vllm":
        try:
            module = importlib.import_module("app.engine.grammars.tools.vllm_builder")
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


_READY: set[str] = set()


@functools.cache
def _formats(name: str) -> tuple[ToolFormat, ...]:
    found = tuple(builder(name).formats())
    _READY.add(name)
    return found


def formats_of(name: str) -> tuple[ToolFormat, ...]:
    """The formats builder ``name`` lists (read from its library once per process).

    Raises:
        GrammarError: the builder is unknown or unavailable.
    """
    return _formats(name)


def formats_for(name: str, tokenizer: str | None) -> tuple[ToolFormat, ...]:
    """The formats builder ``name`` lists, each checked against ``tokenizer``: the request
    model's (vLLM's start-up check runs on it); None: the configured model's.

    Raises:
        GrammarError: the builder is unknown or unavailable.
    """
    if tokenizer is None or name != "vllm":
        return formats_of(name)
    found = builder(name)
    return tuple(found.formats(tokenizer=tokenizer))  # type: ignore[call-arg]


#: The builders whose formats are being read in the background, by name.
_READING: dict[str, threading.Thread] = {}
_READING_LOCK = threading.Lock()
STARTING = "its library is starting (vLLM's code takes 10-30 s the first time): list again soon"


def _read(name: str) -> None:
    try:
        formats_of(name)
    except GrammarError:
        pass  # listed with its reason on the next call, which reads it again from the cache


def tool_formats(*, wait: bool = True) -> list[ToolFormat]:
    """Every builder's formats; a builder that is unavailable is one row with an empty name,
    ``available: false`` and the reason.

    Args:
        wait: False: a builder whose formats are not read yet is read in the background and
            listed as one row named ``starting`` saying so (vLLM's are read by starting its code),
            so that an answer never waits for it.
    """
    rows: list[ToolFormat] = []
    for name in BUILDER_NAMES:
        if not wait and name not in _READY:
            with _READING_LOCK:
                thread = _READING.get(name)
                if thread is None:
                    thread = _READING[name] = threading.Thread(
                        target=_read, args=(name,), name=f"tool-formats-{name}", daemon=True
                    )
                    thread.start()
            thread.join(0.5)  # the in-process builders answer at once
            if thread.is_alive():
                rows.append(ToolFormat(name, "starting", False, None, False, STARTING))
                continue
        try:
            rows.extend(formats_of(name))
        except GrammarError as error:
            reason = str(error).removeprefix(f"the {name} builder is unavailable: ")
            rows.append(ToolFormat(name, "", False, None, False, reason))
    return rows
