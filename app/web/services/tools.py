"""The ``tools`` kind's use cases: its ``$model`` parameters derived, its compile answer fields,
and the formats each builder lists.

A source is parsed on the ``parses`` pool (bounded, shared fairly between clients: a flood of
big sources gets 429s, never the default executor), and every ``$model`` it names is derived in
one sandbox run, whose process is killed when the request is cancelled or its client leaves
(:mod:`app.web.middleware.departure`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine import CompileResult
from app.engine.grammars.tools.base import ToolFormat
from app.engine.grammars.tools.builders import BUILDER_NAMES, formats_for, tool_formats
from app.engine.grammars.tools.request import parse_tools
from app.exceptions import GrammarError, RequestEnded
from app.sandbox.process import Cancel
from app.sandbox.sandbox import PydanticSchema
from app.web.middleware.departure import on_client_leaving
from app.web.runtime.state import AppState

__all__ = ["formats", "tools_answer", "tools_source"]

Derived = Mapping[str, PydanticSchema | GrammarError]


async def tools_source(state: AppState, source: str) -> str:
    """The source the engine compiles: ``source`` itself, or with each ``{"$model": "Name"}``
    replaced by the JSON Schema the sandbox derives for that model of the ``pydantic`` field
    (every model in one sandbox run).

    Args:
        state: the app (its pools and sandbox).
        source: the tools source.

    Raises:
        GrammarError: the source is invalid (with its pointer), a named model does not exist
            (pointed at its ``$model``), or the Pydantic source fails (pointed at ``pydantic``).
        CapacityExceeded: too many parses or sandbox runs wait already (for this client).
        RequestEnded: the client left; the sandbox run was stopped.
    """
    parsed = await state.pools.parses.run(parse_tools, source)  # a builder may list formats
    if not parsed.models:
        return source
    assert parsed.pydantic is not None
    names = list(dict.fromkeys(ref.name for ref in parsed.models))
    try:
        derived = await _derived(state, parsed.pydantic, names)
    except GrammarError as error:  # the source itself failed: placed at ``pydantic``
        raise parsed.model_error(error, ["pydantic"]) from None
    schemas = {n: d if isinstance(d, GrammarError) else d.schema for n, d in derived.items()}
    return await state.pools.parses.run(parsed.with_models, schemas)


async def _derived(state: AppState, pydantic: str, names: Sequence[str]) -> Derived:
    """Every named model derived in one sandbox run, stopped when the request ends."""
    cancel = Cancel()
    job = asyncio.ensure_future(
        state.pools.sandbox.run(state.sandbox.schemas, pydantic, names, cancel=cancel)
    )
    try:
        with on_client_leaving(functools.partial(_stop, job, cancel)):
            await asyncio.wait({job})
        if job.cancelled():
            raise RequestEnded("the client left: its Pydantic sandbox run was stopped")
        return job.result()
    finally:
        if not job.done():  # cancelled: the process goes now, its thread soon after
            _stop(job, cancel)
            job.add_done_callback(_retrieved)


def _stop(job: asyncio.Future[Any], cancel: Cancel) -> None:
    """Stop a run: a running one's process is killed, a waiting one leaves the queue. Once: a
    second cancel would stop the pool's wait for the thread, and its error would go unread."""
    if not cancel.is_set():
        cancel.set()
        job.cancel()


def _retrieved(job: asyncio.Future[Any]) -> None:
    if not job.cancelled():
        job.exception()  # the caller is gone; nobody else will look


def tools_answer(result: CompileResult) -> dict[str, Any]:
    """The compile answer's fields for a ``tools`` source (none for other kinds): the tag built
    (null when none, with the builder's reason), what it leaves unconstrained, the marker that
    ends the reasoning, the builders' versions and notes."""
    build = result.tools
    if build is None:
        return {}
    return {
        "structural_tag": build.tag,
        "no_tag_reason": build.reason,
        "unconstrained": list(result.unconstrained),
        "reasoning_end": build.reasoning_end,
        "builder_versions": dict(build.builder_versions),
        "builder_notes": list(build.notes),
    }


async def formats(state: AppState | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """``GET /api/tool-formats``: every builder's formats, read from the installed libraries
    (off the event loop: vLLM's are read by running its own code, in the background: until
    they are, vLLM is one row saying it is starting). With ``model``, each format's
    availability is checked against that model's tokenizer, as vLLM's start-up check does.

    Raises:
        InvalidInput: no model ``model`` here.
        NotReady: it is loading.
    """
    if state is None or model is None:
        rows = await asyncio.to_thread(tool_formats, wait=False)
        return [dataclasses.asdict(row) for row in rows]
    tokenizer = state.engine_for(model).tools.tokenizer
    found: list[ToolFormat] = []
    for name in BUILDER_NAMES:
        try:
            found += await asyncio.to_thread(formats_for, name, tokenizer)
        except GrammarError as error:
            reason = str(error).removeprefix(f"the {name} builder is unavailable: ")
            found.append(ToolFormat(name, "", False, None, False, reason))
    return [dataclasses.asdict(row) for row in found]
