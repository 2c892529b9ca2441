"""The values a tools source's serve flags take, read from vLLM's own registries in its runner:
what the Tools tab's pickers list (``GET /api/serve-flags``) and what a replay's setting to try
names (:mod:`app.web.services.replay_cause`).

The fields are the tools source's (``reasoning_parser``, ``strict_level``,
``strict_tool_calling``; each tool's ``function.strict`` is the source's own); each is the flag of
a request source's ``serve`` (``SERVE_FLAGS``) that :data:`SERVE_FIELDS` names: one set of flags,
with the two spellings of ``--tool-strict-level`` the contract fixed before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine.grammars.tools.builders import STARTING, builder, tool_formats
from app.exceptions import GrammarError
from app.web.runtime.state import AppState

__all__ = ["SERVE_FIELDS", "reasoning_parsers", "serve_flag_options"]

#: A tools source's field -> the request source's ``serve`` flag it is (``SERVE_FLAGS``).
SERVE_FIELDS: dict[str, str] = {
    "reasoning_parser": "reasoning_parser",
    "strict_level": "tool_strict_level",
    "strict_tool_calling": "strict_tool_calling",
}

#: What the builder runs each field as (for the pickers' titles).
_FLAGS = {
    "reasoning_parser": "--reasoning-parser",
    "strict_level": "--tool-strict-level",
    "strict_tool_calling": "VLLM_ENFORCE_STRICT_TOOL_CALLING",
}


def _starting() -> bool:
    """Whether vLLM's code is still starting (its formats not read yet): never waited for."""
    return any(f.builder == "vllm" and f.name == "starting" for f in tool_formats(wait=False))


async def serve_flag_options(state: AppState, model: str | None = None) -> dict[str, Any]:
    """``GET /api/serve-flags``: the fields a tools source sets as vLLM serve flags, each with
    the values vLLM takes (read from its registries on ``model``'s tokenizer: a reasoning
    parser's end marker depends on it).

    While vLLM's code starts (or where it is unavailable), ``available`` is false and
    ``reason`` says why; the fields are listed with no values.

    Raises:
        InvalidInput: no model ``model`` here.
        NotReady: it is loading.
    """
    tokenizer = state.engine_for(model).tools.tokenizer if model is not None else None
    found: dict[str, Any] | None = None
    reason: str | None = None
    if await asyncio.to_thread(_starting):
        reason = STARTING
    else:
        try:
            found = await asyncio.to_thread(_read, tokenizer)
        except GrammarError as error:
            reason = str(error).removeprefix("the vllm builder is unavailable: ")
    parsers = found["reasoning_parsers"] if found else []
    levels = found["strict_levels"] if found else []
    values: dict[str, list[Any]] = {
        "reasoning_parser": [p["name"] for p in parsers],
        "strict_level": levels,
        "strict_tool_calling": [True, False] if found else [],
    }
    fields = [
        {"field": name, "serve": SERVE_FIELDS[name], "flag": _FLAGS[name], "values": values[name]}
        for name in SERVE_FIELDS
    ]
    return {
        "builder": "vllm",
        "available": found is not None,
        "reason": reason,
        "fields": fields,
        "reasoning_parsers": parsers,
    }


def _read(tokenizer: str | None) -> dict[str, Any]:
    found: Any = builder("vllm")
    flags: dict[str, Any] = found.serve_flags(tokenizer=tokenizer)
    return flags


async def reasoning_parsers(state: AppState, model: str) -> list[dict[str, Any]]:
    """vLLM's reasoning parsers with their end markers on ``model``'s tokenizer; none while
    vLLM's code starts or where it is unavailable (never waited for)."""
    answer = await serve_flag_options(state, model)
    parsers: list[dict[str, Any]] = answer["reasoning_parsers"]
    return parsers
