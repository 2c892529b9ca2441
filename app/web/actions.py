"""What the JSON API and the page both do, once: compile, open sessions, step, replay."""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine import CompileResult, Engine, ReplayResult, SamplingParams, StepRecord
from app.exceptions import RunInProgress
from app.web.models import GrammarIn, ReplayIn, SessionIn
from app.web.sessions import SessionHandle
from app.web.state import AppState

__all__ = [
    "back",
    "compile_answer",
    "compile_grammar",
    "create_session",
    "force",
    "replay",
    "session_answer",
    "step",
    "step_response",
]


async def compile_grammar(state: AppState, engine: Engine, grammar: GrammarIn) -> CompileResult:
    """Compile off the event loop (the compile itself runs in a worker process)."""
    return await asyncio.to_thread(engine.compile, grammar.to_spec(state.settings))


def compile_answer(result: CompileResult, grammar: GrammarIn) -> dict[str, Any]:
    """The ``/api/compile`` answer."""
    return {
        "grammar": result.grammar_text,
        "json_schema": None,
        "models": None,
        "warnings": list(result.warnings),
        "stats": {
            "compile_ms": result.compile_ms,
            "size_bytes": result.size_bytes,
            "cached": result.cached,
        },
        "options": grammar.options.echo(),
    }


async def create_session(state: AppState, engine: Engine, body: SessionIn) -> SessionHandle:
    """Compile, render the prompt and register a new session."""
    spec = body.grammar.to_spec(state.settings)
    sampling = SamplingParams.create(
        body.sampling.temperature, body.sampling.top_p, body.sampling.seed
    )
    session = await asyncio.to_thread(
        engine.new_session,
        spec,
        messages=body.chat_messages(),
        raw_prompt=body.raw_prompt,
        sampling=sampling,
        max_tokens=body.max_tokens,
        top_k=body.top_k,
    )
    request = body.model_dump(mode="json")
    request["sampling"]["seed"] = sampling.seed
    return state.sessions.add(session, request)


def session_answer(handle: SessionHandle) -> dict[str, Any]:
    """The ``POST /api/sessions`` answer."""
    session = handle.session
    return {
        "id": handle.id,
        "prompt": {"text": session.prompt.text, "tokens": len(session.prompt.token_ids)},
        "sampling": {
            "temperature": session.sampling.temperature,
            "top_p": session.sampling.top_p,
            "seed": session.sampling.seed,
        },
        "model": session.model.identity.to_dict(),
    }


def step_response(handle: SessionHandle, steps: list[StepRecord]) -> dict[str, Any]:
    """The step response every session action answers with."""
    session = handle.session
    validation = session.validation()
    return {
        "steps": [r.to_dict() for r in steps],
        "done": session.done,
        "stop_reason": session.stop_reason.value if session.stop_reason else None,
        "text": session.text,
        "validation": validation.to_dict() if validation else None,
    }


def _idle(handle: SessionHandle) -> None:
    if handle.streaming:
        raise RunInProgress("a run is streaming for this session: pause it first")


async def step(handle: SessionHandle, n: int) -> list[StepRecord]:
    """Take ``n`` steps (fewer if the session stops); SessionFinished if it already has."""
    _idle(handle)

    def work() -> list[StepRecord]:
        first = handle.session.step()
        return [first, *handle.session.run(n - 1)]

    async with handle.lock:
        return await asyncio.to_thread(work)


async def back(handle: SessionHandle, n: int) -> None:
    """Undo ``n`` steps."""
    _idle(handle)
    async with handle.lock:
        await asyncio.to_thread(handle.session.back, n)


async def force(handle: SessionHandle, token_id: int, at: int | None) -> StepRecord:
    """Force ``token_id`` at the next step, or at step ``at`` after going back to it."""
    _idle(handle)
    session = handle.session
    async with handle.lock:
        if at is None:
            return await asyncio.to_thread(session.force, token_id)
        return await asyncio.to_thread(session.force_at, at, token_id)


async def replay(state: AppState, engine: Engine, body: ReplayIn) -> ReplayResult:
    """Walk the text or token ids through the grammar."""
    spec = body.grammar.to_spec(state.settings)
    return await asyncio.to_thread(engine.replay, spec, text=body.text, token_ids=body.token_ids)
