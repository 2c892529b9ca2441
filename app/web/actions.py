"""What the JSON API and the page both do, once: compile, open sessions, step, replay."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from app.engine import (
    CompileResult,
    Engine,
    GrammarSpec,
    ReplayResult,
    SamplingParams,
    StepRecord,
    Validation,
)
from app.exceptions import RunInProgress
from app.sandbox.sandbox import PydanticSchema
from app.web.models import GrammarIn, ReplayIn, SessionIn
from app.web.sessions import SessionHandle
from app.web.state import AppState

__all__ = [
    "Resolved",
    "back",
    "compile_answer",
    "compile_grammar",
    "create_session",
    "force",
    "replay",
    "resolve",
    "session_answer",
    "step",
    "step_response",
]


@dataclass(frozen=True)
class Resolved:
    """A grammar request made ready for the engine; Pydantic sources through the sandbox."""

    spec: GrammarSpec
    pydantic: PydanticSchema | None = None


async def resolve(state: AppState, grammar: GrammarIn) -> Resolved:
    """The engine's spec for a grammar request (a Pydantic source becomes its JSON Schema)."""
    grammar.check_size(state.settings)
    if grammar.kind != "pydantic":
        return Resolved(grammar.to_spec())
    derived = await asyncio.to_thread(
        state.sandbox.schema, grammar.source, grammar.options.root_model
    )
    return Resolved(grammar.to_spec(json.dumps(derived.schema, indent=2)), derived)


async def compile_grammar(
    state: AppState, engine: Engine, grammar: GrammarIn
) -> tuple[CompileResult, Resolved]:
    """Compile off the event loop (the compile itself runs in a worker process)."""
    resolved = await resolve(state, grammar)
    return await asyncio.to_thread(engine.compile, resolved.spec), resolved


def compile_answer(result: CompileResult, grammar: GrammarIn, resolved: Resolved) -> dict[str, Any]:
    """The ``/api/compile`` answer."""
    derived = resolved.pydantic
    return {
        "grammar": result.grammar_text,
        "json_schema": derived.schema if derived else None,
        "models": list(derived.models) if derived else None,
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
    resolved = await resolve(state, body.grammar)
    sampling = SamplingParams.create(
        body.sampling.temperature, body.sampling.top_p, body.sampling.seed
    )
    session = await asyncio.to_thread(
        engine.new_session,
        resolved.spec,
        messages=body.chat_messages(resolved.spec),
        raw_prompt=body.raw_prompt,
        sampling=sampling,
        max_tokens=body.max_tokens,
        top_k=body.top_k,
    )
    request = body.model_dump(mode="json")
    request["sampling"]["seed"] = sampling.seed
    pydantic = None
    if resolved.pydantic is not None:
        pydantic = (body.grammar.source, body.grammar.options.root_model)
    handle = state.sessions.add(session, request, pydantic)
    state.sessions.enforce_memory(keep=handle)
    return handle


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


async def validation(state: AppState, handle: SessionHandle) -> Validation | None:
    """The verdict on a stopped session's output: the Pydantic model itself for Pydantic
    sources (in the sandbox, once per text), the engine's jsonschema check otherwise."""
    session = handle.session
    if not session.done:
        return None
    if handle.pydantic is None:
        return session.validation()
    text = session.text
    if handle.validated is None or handle.validated[0] != text:
        source, root = handle.pydantic
        verdict = await asyncio.to_thread(state.sandbox.validate, source, root, text)
        handle.validated = (text, verdict)
    return handle.validated[1]


async def step_response(
    state: AppState, handle: SessionHandle, steps: list[StepRecord]
) -> dict[str, Any]:
    """The step response every session action answers with; ``state`` is the parser state
    after the last token (the state the next mask is computed in)."""
    session = handle.session
    verdict = await validation(state, handle)
    # Off the loop: reading the parser state waits for a step in flight on another thread.
    after = await asyncio.to_thread(lambda: session.state)
    return {
        "steps": [r.to_dict() for r in steps],
        "done": session.done,
        "stop_reason": session.stop_reason.value if session.stop_reason else None,
        "text": session.text,
        "validation": verdict.to_dict() if verdict else None,
        "state": after.to_dict(),
    }


def _idle(handle: SessionHandle) -> None:
    if handle.streaming:
        raise RunInProgress("a run is streaming for this session: pause it first")


async def step(state: AppState, handle: SessionHandle, n: int) -> list[StepRecord]:
    """Take ``n`` steps (fewer if the session stops); SessionFinished if it already has."""
    _idle(handle)

    def work() -> list[StepRecord]:
        first = handle.session.step()
        return [first, *handle.session.run(n - 1)]

    async with handle.lock:
        records = await asyncio.to_thread(work)
    state.sessions.enforce_memory(keep=handle)
    return records


async def back(handle: SessionHandle, n: int) -> None:
    """Undo ``n`` steps."""
    _idle(handle)
    async with handle.lock:
        await asyncio.to_thread(handle.session.back, n)


async def force(
    state: AppState, handle: SessionHandle, token_id: int, at: int | None
) -> StepRecord:
    """Force ``token_id`` at the next step, or at step ``at`` after going back to it."""
    _idle(handle)
    session = handle.session
    async with handle.lock:
        if at is None:
            record = await asyncio.to_thread(session.force, token_id)
        else:
            record = await asyncio.to_thread(session.force_at, at, token_id)
    state.sessions.enforce_memory(keep=handle)
    return record


async def replay(state: AppState, engine: Engine, body: ReplayIn) -> ReplayResult:
    """Walk the text or token ids through the grammar."""
    resolved = await resolve(state, body.grammar)
    return await asyncio.to_thread(
        engine.replay, resolved.spec, text=body.text, token_ids=body.token_ids
    )
