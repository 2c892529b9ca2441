"""The JSON API (``shared/API.md``), health checks, and the examples and vocabulary for the page."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from app.caps import MAX_TOKENS
from app.examples import load_examples
from app.settings import LOCAL_MODEL_ID
from app.web import actions, sharing
from app.web.deps import EngineDep, HandleDep, StateDep
from app.web.models import (
    CompileIn,
    CountIn,
    ForceIn,
    OpenPermalinkIn,
    PermalinkIn,
    ReplayIn,
    SessionIn,
    check_test_sizes,
)
from app.web.stream import END_ID, run_events

__all__ = ["router"]

router = APIRouter()


def _encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


async def _json(body: Any, *, headers: dict[str, str] | None = None) -> Response:
    """JSON encoded off the event loop: every record of a session weighs tens of megabytes."""
    content = await asyncio.to_thread(_encode, body)
    return Response(content, media_type="application/json", headers=headers)


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    """200 while the process serves."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"], responses={503: {"description": "the model is loading"}})
async def readyz(state: StateDep) -> JSONResponse:
    """200 once the model is loaded, 503 before (or if it failed to load); both say the
    containment level of the Pydantic sandbox (``full``, ``seccomp`` or ``none``)."""
    sandbox = (await asyncio.to_thread(lambda: state.sandbox.level)).value
    if state.engine is None:
        reason = (
            f"the model failed to load: {state.load_error}"
            if state.load_error
            else ("the model is loading")
        )
        body = {"error": {"message": reason, "code": "not_ready"}, "sandbox": sandbox}
        return JSONResponse(body, status_code=503)
    return JSONResponse(
        {"status": "ready", "model": state.engine.model.identity.to_dict(), "sandbox": sandbox}
    )


@router.get("/api/models", tags=["models"])
async def models(state: StateDep) -> list[dict[str, Any]]:
    """The local model and the remote engines (``MASKSCOPE_REMOTE_ENGINES``), each with its
    readiness and, when not ready, the reason."""
    return state.models()


@router.post("/api/compile", tags=["grammar"])
async def compile_grammar(body: CompileIn, state: StateDep) -> dict[str, Any]:
    """Compile a grammar request for the tokenizer of the model ``model`` names: the grammar
    text, xgrammar's warnings, compile stats."""
    result, resolved = await actions.compile_grammar(state, state.engine_for(body.model), body)
    return actions.compile_answer(result, body, resolved)


@router.post("/api/sessions", tags=["sessions"])
async def create_session(body: SessionIn, state: StateDep) -> dict[str, Any]:
    """Open a session on the model ``model`` names: compile, render the prompt, ready to step."""
    handle = await actions.create_session(state, body)
    return actions.session_answer(handle)


@router.get("/api/sessions/{session_id}", tags=["sessions"])
async def get_session(handle: HandleDep, state: StateDep) -> Response:
    """All steps so far."""
    return await _json(await actions.step_response(state, handle, list(handle.session.steps)))


@router.post("/api/sessions/{session_id}/step", tags=["sessions"])
async def step(handle: HandleDep, state: StateDep, body: CountIn | None = None) -> Response:
    """Take ``n`` steps (409 if the session has stopped)."""
    steps = await actions.step(state, handle, (body or CountIn()).n)
    return await _json(await actions.step_response(state, handle, steps))


@router.post("/api/sessions/{session_id}/back", tags=["sessions"])
async def back(handle: HandleDep, state: StateDep, body: CountIn | None = None) -> dict[str, Any]:
    """Undo ``n`` steps."""
    await actions.back(state, handle, (body or CountIn()).n)
    return await actions.step_response(state, handle, [])


@router.post("/api/sessions/{session_id}/force", tags=["sessions"])
async def force(handle: HandleDep, state: StateDep, body: ForceIn) -> dict[str, Any]:
    """Force a token (409 with the reason when the mask blocks it; nothing changes then)."""
    record = await actions.force(state, handle, body.token_id, body.at)
    return await actions.step_response(state, handle, [record])


@router.post("/api/sessions/{session_id}/pause", tags=["sessions"])
async def pause(handle: HandleDep, state: StateDep) -> dict[str, Any]:
    """Stop a streaming run after the step in flight (which is still sent)."""
    handle.pause = handle.streaming
    return await actions.step_response(state, handle, [])


@router.get(
    "/api/sessions/{session_id}/events",
    tags=["sessions"],
    responses={204: {"description": "a reconnect after `end`: the run is over, nothing starts"}},
)
async def events(
    request: Request,
    handle: HandleDep,
    state: StateDep,
    fmt: Annotated[Literal["html", "json"], Query(alias="format")] = "html",
    after: Annotated[
        int, Query(ge=-1, le=MAX_TOKENS, description="send steps after this index")
    ] = -1,
    last_event_id: Annotated[str | None, Header(max_length=16)] = None,
) -> Response:
    """Run the session, streaming each step as a server-sent event.

    ``step`` events carry the step's HTML fragment (with the packed bitmask in ``data-bitmask``)
    or, with ``format=json``, its record; then ``done`` or ``paused``, then ``end`` (SSE id
    ``end``). A reconnect with ``Last-Event-ID`` resumes after that step with every index sent
    exactly once, and never restarts a run that is over; a reconnect after ``end`` gets 204.
    """
    if last_event_id == END_ID:
        return Response(status_code=204)
    resume = last_event_id is not None and last_event_id.isdigit()
    if resume:
        after = int(str(last_event_id))
    stream = run_events(request, state, handle, after=after, fmt=fmt, resume=resume)
    return EventSourceResponse(stream, ping=15)


@router.get("/api/sessions/{session_id}/trace", tags=["sessions"])
async def trace(handle: HandleDep, state: StateDep) -> Response:
    """The whole trace as a JSON download: request, model identity, every step record."""
    answer = await actions.step_response(state, handle, list(handle.session.steps))
    body = {"request": handle.request, "model": handle.session.model.identity.to_dict(), **answer}
    headers = {"Content-Disposition": f'attachment; filename="maskscope-trace-{handle.id}.json"'}
    return await _json(body, headers=headers)


@router.post("/api/permalinks", tags=["permalinks"], status_code=201,
             responses={200: {"description": "the same snapshot already existed"}})  # fmt: skip
async def create_permalink(body: PermalinkIn, state: StateDep) -> JSONResponse:
    """Store an immutable snapshot; equal content gives an equal id (201 new, 200 existing).
    Its schema unit tests (``tests``) are run, and their verdicts kept with them."""
    body.check_size(state.settings)
    check_test_sizes(body.tests)
    engine = state.engine_for(body.model)
    tests = await sharing.recorded_tests(state, engine, body.grammar, body.tests)

    def store() -> tuple[str, bool]:
        snapshot = sharing.snapshot_of_request(body, engine.model.identity, tests=tests)
        return state.store.put(snapshot)

    snapshot_id, created = await asyncio.to_thread(store)
    return JSONResponse(
        {"id": snapshot_id, "url": f"/s/{snapshot_id}"}, status_code=201 if created else 200
    )


@router.get("/api/permalinks/{snapshot_id}", tags=["permalinks"])
async def get_permalink(
    snapshot_id: Annotated[str, Path(max_length=64)], state: StateDep, _: EngineDep
) -> dict[str, Any]:
    """The stored snapshot, with the model and versions recorded at share time, and what differs
    from this server's; its tests (``[]`` when it holds none) judged again here
    (``test_results``, each with ``differs`` from the verdicts recorded at share time)."""
    snapshot, created = await sharing.load(state, snapshot_id)
    differences = sharing.differences(state, snapshot)
    engine = sharing.engine_of(state, snapshot)
    results = await sharing.test_results(state, engine, snapshot) if engine else []
    return {"id": snapshot_id, "created_at": created, "tests": [], **snapshot,
            "differences": differences, "test_results": results}  # fmt: skip


@router.post("/api/permalinks/{snapshot_id}/session", tags=["permalinks"])
async def open_permalink(
    snapshot_id: Annotated[str, Path(max_length=64)],
    state: StateDep,
    body: OpenPermalinkIn | None = None,
) -> Response:
    """Open a new session from the snapshot and replay its trace (409 if it does not replay, or
    names a model not configured here). ``model`` opens it on another model instead: its tokens
    may differ, and a forced token may not replay."""
    snapshot, _ = await sharing.load(state, snapshot_id)
    handle = await sharing.open_snapshot(state, snapshot, model=body.model if body else None)
    answer = await actions.step_response(state, handle, list(handle.session.steps))
    return await _json({**actions.session_answer(handle), **answer})


@router.post("/api/replay", tags=["grammar"])
async def replay(body: ReplayIn, state: StateDep) -> Response:
    """Walk a text or token ids through the grammar, without the model (with the tokenizer of
    the one ``model`` names): at most ``MASKSCOPE_REPLAY_MAX_TOKENS`` tokens (413 beyond),
    bitmasks only for ``bitmask_for``."""
    result = await actions.replay(state, state.engine_for(body.model), body)
    return await _json(result.to_dict())


@router.get("/api/examples", tags=["examples"])
async def examples() -> list[dict[str, str]]:
    """The example schemas."""
    return [{"id": e.id, "title": e.title, "description": e.description} for e in load_examples()]


@router.get("/api/examples/{example_id}", tags=["examples"])
async def example(example_id: Annotated[str, Path(max_length=64)]) -> dict[str, Any]:
    """One example: its sources by kind and the prompt it was written for."""
    found = next((e for e in load_examples() if e.id == example_id), None)
    if found is None:
        raise HTTPException(404, f"no example {example_id!r}")
    return {
        "id": found.id,
        "title": found.title,
        "description": found.description,
        "sources": {"json_schema": found.source(".json"), "pydantic": found.source(".py")},
        "system": found.system,
        "prompt": found.prompt,
        "max_tokens": found.max_tokens,
        "schema_in_prompt": found.schema_in_prompt,
    }


@router.get("/api/vocab", tags=["examples"])
async def vocab(
    state: StateDep,
    model: Annotated[str, Query(max_length=64, description="`local` or a remote engine's id")] = (
        LOCAL_MODEL_ID
    ),
) -> JSONResponse:
    """The text of every token id of the tokenizer of the model ``model`` names, for the bitmask
    picture and the token search."""
    tokens = state.engine_for(model).model.tokens
    texts = [tokens.text(i) for i in range(tokens.vocab_size)]
    return JSONResponse(
        {"vocab_size": tokens.vocab_size, "tokens": texts},
        headers={"Cache-Control": "max-age=3600"},
    )
