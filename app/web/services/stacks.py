"""``GET /api/stacks``: every serving stack, its versions read in its own process."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from app.engine import AnyEngine
from app.engine.grammars.request import serve_flags
from app.engine.records import ReplayResult
from app.engine.stack_pins import MASKSCOPE
from app.engine.stacks import runner, stack_infos
from app.engine.stacks.diff import UpgradeDiff, upgrade_diff
from app.engine.stacks.replay import stack_replay
from app.exceptions import InvalidInput
from app.web.runtime.state import AppState
from app.web.schemas.bodies import DiffIn, ReplayIn
from app.web.services import walks
from app.web.services.actions import compile_grammar
from app.web.services.diff_doctor import doctor_diff
from app.web.services.end_rules import end_rules_of

__all__ = ["diff", "replay_on_stack", "stacks"]


async def stacks(state: AppState) -> list[dict[str, Any]]:
    """Each stack as the contract lists it: ``{"id", "versions", "forward", "available",
    "reason"}`` (off the event loop: a stack's runner may be starting)."""
    rows = await asyncio.to_thread(stack_infos, state.settings)
    return [dataclasses.asdict(row) for row in rows]


async def replay_on_stack(
    state: AppState, engine: AnyEngine, body: ReplayIn, stack: str
) -> ReplayResult:
    """``POST /api/replay`` under ``stack`` (a vLLM release): each step's row is the one that
    release's own scheduler masks with (:func:`app.engine.stacks.replay.stack_replay`); the
    ``reasoning`` setting ``mask_everywhere`` is vLLM's ``enable_in_reasoning``. The end rules
    are the body's and a pasted request's (:func:`~app.web.services.end_rules.end_rules_of`),
    reported on the stack's rows.

    Raises:
        InvalidInput: no such stack (``/stack``).
        GrammarError: the stack refuses the request, or is unavailable (its reason).
    """
    builder = runner(state.settings, stack)
    grammar, resolved = await compile_grammar(state, engine, body.grammar, stack)
    serve = serve_flags(resolved.request, body.reasoning)
    return await walks.walked(
        state,
        state.pools.replays,
        "the replay",
        stack_replay,
        builder,
        grammar,
        engine.model.tokens,
        tokenizer=engine.tools.tokenizer,
        text=body.text,
        token_ids=body.token_ids or (),
        bitmask_for=body.bitmask_for,
        serve=serve,
        end_rules=end_rules_of(body, resolved.request),
        model=engine.model,
    )


async def diff(
    state: AppState,
    engine: AnyEngine,
    body: DiffIn,
    *,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> UpgradeDiff:
    """``POST /api/diff``: the source under ``body.stacks`` (A then B), each stack's own work
    compared (:mod:`app.engine.stacks.diff`), and the Doctor's rows that differ between the
    grammars the two compile, examined in the Doctor's workers
    (:mod:`app.web.services.diff_doctor`; ``disconnected`` stops an examination).

    Raises:
        InvalidInput: no such stack (``/stacks/<i>``), or an id outside the vocabulary.
        ReplayTooLong: more tokens than a replay walks.
        GrammarError: a stack refuses the request, or is unavailable (its reason).
        RequestEnded: the client left.
    """
    for index, stack in enumerate(body.stacks):
        try:
            if stack != MASKSCOPE:
                runner(state.settings, stack)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, pointer=f"/stacks/{index}") from None
    # a pasted request is derived by each stack's own code, and walked under its serve flags
    compiled = [await compile_grammar(state, engine, body.grammar, stack) for stack in body.stacks]
    grammars = [grammar for grammar, _ in compiled]
    serves = [serve_flags(resolved.request, body.reasoning) for _, resolved in compiled]
    walked = await walks.walked(
        state,
        state.pools.replays,
        "the diff",
        upgrade_diff,
        state.settings,
        body.stacks,
        grammars,
        engine.model.tokens,
        tokenizer=engine.tools.tokenizer,
        text=body.text,
        token_ids=body.token_ids,
        serve=serves,
    )
    specs = [grammar.spec for grammar in grammars]
    changes = await doctor_diff(
        state, engine, body.stacks, specs, serves, disconnected=disconnected
    )
    return dataclasses.replace(walked, doctor_diff=changes)
