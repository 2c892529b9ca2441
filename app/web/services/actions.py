"""What the JSON API and the page both do, once: compile, open sessions, step, replay."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine import (
    AnyEngine,
    CompileResult,
    GrammarSpec,
    MaskingLibrary,
    ReplayResult,
    ReplayToken,
    SamplingParams,
    Session,
    StepRecord,
    Validation,
)
from app.engine.grammars.reasoning import ReasoningMode
from app.engine.grammars.request import DerivedRequest
from app.engine.stack_pins import MASKSCOPE
from app.exceptions import InvalidInput, RunInProgress
from app.sandbox.sandbox import PydanticSchema
from app.web.middleware.clients import current_client
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState
from app.web.schemas.bodies import GrammarIn, ReplayIn, SessionIn
from app.web.services import rebuilds, request_source, walks
from app.web.services.end_rules import end_rules_of
from app.web.services.leaving import unless_left
from app.web.services.tools import tools_answer, tools_source

__all__ = [
    "Resolved",
    "back",
    "compile_answer",
    "compile_grammar",
    "compiled",
    "compiled_follower",
    "create_session",
    "follower_summary",
    "force",
    "replay",
    "replay_token",
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
    request: DerivedRequest | None = None


async def resolve(
    state: AppState, grammar: GrammarIn, engine: AnyEngine, stack: str = MASKSCOPE
) -> Resolved:
    """The engine's spec for a grammar request (a Pydantic source becomes its JSON Schema; a
    pasted request, the grammar ``stack`` derives from it on ``engine``'s tokenizer)."""
    grammar.check_size(state.settings)
    if grammar.kind == "request":
        request = await request_source.derive(state, engine, grammar.source, stack)
        return Resolved(grammar.to_spec(request=request), request=request)
    if grammar.kind == "tools":  # its $model parameters derived in the sandbox
        return Resolved(grammar.to_spec(await tools_source(state, grammar.source)))
    if grammar.kind != "pydantic":
        return Resolved(grammar.to_spec())
    derived = await state.pools.sandbox.run(
        state.sandbox.schema, grammar.source, grammar.options.root_model
    )
    return Resolved(grammar.to_spec(json.dumps(derived.schema, indent=2)), derived)


async def compiled(state: AppState, engine: AnyEngine, spec: GrammarSpec) -> CompileResult:
    """The compiled grammar: from the cache at once, else from a compile worker (429 when too
    many compiles wait for one)."""
    hit = engine.cached(spec)
    if hit is not None:
        return hit
    # a request the page replaced (a picker change) leaves the queue: one compile per person
    return await unless_left(state.pools.compiles.run(engine.compile, spec), "compile")


async def compile_grammar(
    state: AppState, engine: AnyEngine, grammar: GrammarIn, stack: str = MASKSCOPE
) -> tuple[CompileResult, Resolved]:
    """Compile off the event loop (the compile itself runs in a worker process); a pasted
    request is derived by ``stack``'s code."""
    resolved = await resolve(state, grammar, engine, stack)
    return await compiled(state, engine, resolved.spec), resolved


async def compiled_follower(
    state: AppState, engine: AnyEngine, spec: GrammarSpec, compare: str | None
) -> MaskingLibrary | None:
    """Compare mode: compile ``spec`` with the ``compare`` library too (in the compile pool, so
    the session or replay finds it cached); the library, or None without compare mode."""
    if compare is None:
        return None
    library = MaskingLibrary(compare)
    if library is not spec.library:  # the engine refuses the same library, with the reason
        await compiled(state, engine, dataclasses.replace(spec, library=library))
    return library


def compile_answer(result: CompileResult, grammar: GrammarIn, resolved: Resolved) -> dict[str, Any]:
    """The ``/api/compile`` answer (with ``not_carried`` when llguidance compiled it, or for a
    structural tag, which takes no compile options)."""
    derived = resolved.pydantic
    answer = {
        "grammar": result.grammar_text,
        "json_schema": derived.schema if derived else None,
        "models": list(derived.models) if derived else None,
        "stripped": list(derived.stripped) if derived else None,
        "warnings": list(result.warnings),
        "stats": {
            "compile_ms": result.compile_ms,
            "size_bytes": result.size_bytes,
            "cached": result.cached,
        },
        "options": grammar.options.echo(grammar.engine),
        "engine": grammar.engine,
    }
    if result.spec.library is MaskingLibrary.LLGUIDANCE or result.not_carried:
        answer["not_carried"] = list(result.not_carried)
    if resolved.request is not None:
        answer["derived"] = resolved.request.to_dict()
    return answer | tools_answer(result)


async def create_session(state: AppState, body: SessionIn) -> SessionHandle:
    """Compile, render the prompt and register a new session on the model the body names."""
    body.check_size(state.settings)
    engine = state.engine_for(body.model)
    resolved = await resolve(state, body.grammar, engine)
    grammar = await compiled(state, engine, resolved.spec)
    compare = await compiled_follower(state, engine, resolved.spec, body.compare)
    sampling = SamplingParams.create(
        body.sampling.temperature, body.sampling.top_p, body.sampling.seed
    )
    session = await state.pools.steps.run(
        engine.new_session,
        grammar,
        messages=body.chat_messages(resolved.spec),
        raw_prompt=body.raw_prompt,
        sampling=sampling,
        max_tokens=body.max_tokens,
        top_k=body.top_k,
        compare=compare,
        draft_tokens=body.draft_tokens,
        reasoning=ReasoningMode(body.reasoning),
        breakpoints=[b.to_breakpoint() for b in body.breakpoints],
        end_rules=body.end_rules(),
    )
    request = body.model_dump(mode="json")
    request["sampling"]["seed"] = sampling.seed
    pydantic = None
    if resolved.pydantic is not None:
        pydantic = (body.grammar.source, body.grammar.options.root_model)
    handle = state.sessions.add(session, request, pydantic, client=current_client())
    state.sessions.enforce_memory(keep=handle)
    rebuilds.attach(handle)  # a permalink's rebuild under way: its page follows the steps
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
    """The verdict on a stopped session's output, once per output: the Pydantic model itself
    for Pydantic sources (in the sandbox), the engine's jsonschema check otherwise."""
    session = handle.session
    if not session.done:
        return None
    key = (session.text, session.stop_reason)
    if handle.validated is None or handle.validated[0] != key:
        if handle.pydantic is None:
            async with handle.lock:  # the check reads the matcher: wait for any action first
                verdict = await state.pools.steps.run(session.validation)
        else:
            source, root = handle.pydantic
            verdict = await state.pools.sandbox.run(state.sandbox.validate, source, root, key[0])
        if verdict is None:  # went back meanwhile
            return None
        handle.validated = (key, verdict)
    return handle.validated[1]


async def step_response(
    state: AppState, handle: SessionHandle, steps: list[StepRecord]
) -> dict[str, Any]:
    """The step response every session action answers with; ``state`` is the parser state
    after the last token (the state the next mask is computed in)."""
    session = handle.session
    verdict = await validation(state, handle)
    # Off the loop: reading the parser state waits for a step in flight on another thread.
    after = await state.pools.steps.run(lambda: session.state)
    answer = {
        "steps": [r.to_dict() for r in steps],
        "done": session.done,
        "stop_reason": session.stop_reason.value if session.stop_reason else None,
        "text": session.text,
        "validation": verdict.to_dict() if verdict else None,
        "state": after.to_dict(),
        "follower": follower_summary(session),
    }
    end = await state.pools.steps.run(session.end_report)  # with end rules only
    if end is not None:
        answer["end"] = end.to_dict()
    return answer


def follower_summary(session: Session) -> dict[str, Any] | None:
    """Compare mode: the follower's engine, the first step where it diverged, and where (and
    why) it ended; None without compare mode."""
    follower = session.follower
    if follower is None:
        return None
    last = session.steps[-1].follower if session.steps else None
    return {
        "engine": follower.engine,
        "first_divergence": session.first_divergence,
        "ended_at": last.ended_at if last else None,
        "refused": last.refused if last else None,
    }


def _idle(handle: SessionHandle) -> None:
    if handle.runs.streaming:
        raise RunInProgress("a run is streaming for this session: pause it first")


async def step(state: AppState, handle: SessionHandle, n: int) -> list[StepRecord]:
    """Take ``n`` steps (fewer if the session stops, or a breakpoint holds); SessionFinished if
    it already has.

    Each step has a walk budget of its own: one past it is a 422 ``grammar_too_slow`` and
    leaves no trace (the steps before it are kept, and the session stays usable: going back
    makes the next step cheaper)."""
    _idle(handle)

    def work(each: walks.Budgeted) -> list[StepRecord]:
        session = handle.session
        records = [each(session.step)]
        while len(records) < n and not session.done and session.watch.hit is None:
            records.append(each(session.step))
        return records

    async with handle.lock:
        records = await walks.stepped(state, handle.session, work)
    state.sessions.enforce_memory(keep=handle)
    return records


async def back(state: AppState, handle: SessionHandle, n: int) -> None:
    """Undo ``n`` steps."""
    _idle(handle)
    async with handle.lock:
        await state.pools.steps.run(handle.session.back, n)


async def force(
    state: AppState, handle: SessionHandle, token_id: int, at: int | None
) -> StepRecord:
    """Force ``token_id`` at the next step, or at step ``at`` after going back to it."""
    _idle(handle)
    session = handle.session
    async with handle.lock:
        if at is None:
            record = await walks.stepped(state, session, lambda each: each(session.force, token_id))
        else:
            record = await walks.stepped(
                state, session, lambda each: each(session.force_at, at, token_id)
            )
    state.sessions.enforce_memory(keep=handle)
    return record


async def replay(state: AppState, engine: AnyEngine, body: ReplayIn) -> ReplayResult:
    """Walk the text or token ids through the grammar (413 past the token cap), under the end
    rules of the body and of a pasted request (:func:`end_rules_of`)."""
    grammar, resolved = await compile_grammar(state, engine, body.grammar)
    compare = await compiled_follower(state, engine, grammar.spec, body.compare)
    return await walks.walked(
        state,
        state.pools.replays,
        "the replay",
        engine.replay,
        grammar,
        text=body.text,
        token_ids=body.token_ids,
        bitmask_for=body.bitmask_for,
        compare=compare,
        reasoning=ReasoningMode(body.reasoning),
        end_rules=end_rules_of(body, resolved.request),
    )


async def replay_token(
    state: AppState,
    engine: AnyEngine,
    grammar_in: GrammarIn,
    text: str,
    index: int,
    token_ids: Sequence[int] = (),
) -> ReplayToken:
    """Token ``index`` of the replay of ``text`` then ``token_ids``, with its bitmask: only the
    tokens up to it are walked, and only its bitmask is kept.

    Raises:
        InvalidInput: the replay has no token ``index`` (the text is shorter, or refused before).
    """
    grammar, _ = await compile_grammar(state, engine, grammar_in)

    def work() -> ReplayResult:
        ids = (engine.model.tokens.encode(text) + list(token_ids))[: index + 1]
        return engine.replay(grammar, token_ids=ids, bitmask_for=(index,))

    result = await walks.walked(state, state.pools.replays, "the replay", work)
    if index >= len(result.tokens):
        raise InvalidInput(f"token {index} does not exist (the replay has {len(result.tokens)})")
    return result.tokens[index]
