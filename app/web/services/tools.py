"""The ``tools`` kind's use cases: its ``$model`` parameters derived, its compile answer fields,
and the formats each builder lists."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from app.engine import CompileResult
from app.engine.tools.builders import tool_formats
from app.engine.tools.request import ParsedTools, parse_tools
from app.exceptions import GrammarError, PydanticFailed
from app.web.state import AppState

__all__ = ["formats", "tools_answer", "tools_source"]


async def tools_source(state: AppState, source: str) -> str:
    """The source the engine compiles: ``source`` itself, or with each ``{"$model": "Name"}``
    replaced by the JSON Schema the sandbox derives for that model of the ``pydantic`` field.

    Raises:
        GrammarError: the source is invalid (with its pointer), a named model does not exist
            (pointed at its ``$model``), or the Pydantic source fails (pointed at ``pydantic``).
    """
    parsed = await asyncio.to_thread(parse_tools, source)  # a builder may list its formats
    if not parsed.models:
        return source
    assert parsed.pydantic is not None
    schemas: dict[str, dict[str, Any]] = {}
    for ref in parsed.models:
        if ref.name not in schemas:
            schemas[ref.name] = await _derived(state, parsed, ref.name, ref.parts)
    return parsed.resolved(schemas)


async def _derived(
    state: AppState, parsed: ParsedTools, name: str, parts: list[str | int]
) -> dict[str, Any]:
    assert parsed.pydantic is not None
    try:
        derived = await state.pools.sandbox.run(state.sandbox.schema, parsed.pydantic, name)
    except GrammarError as error:
        where: list[str | int] = ["pydantic"]
        if error.message.startswith("no model named"):
            where = parts
        located = parsed.error_at(where, f"the pydantic field: {error.message}")
        if isinstance(error, PydanticFailed) or type(error) is GrammarError:
            raise located from None
        # SourceRefused, SandboxUnconfined: their own code, placed the same way
        raise type(error)(
            located.message, line=located.line, column=located.column, pointer=located.pointer
        ) from None
    return derived.schema


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


async def formats() -> list[dict[str, Any]]:
    """``GET /api/tool-formats``: every builder's formats, read from the installed libraries
    (off the event loop: vLLM's are read by running its own code, in the background: until
    they are, vLLM is one row saying it is starting)."""
    rows = await asyncio.to_thread(tool_formats, wait=False)
    return [dataclasses.asdict(row) for row in rows]
