"""The upgrade diff's ``doctor_diff``: the Doctor's examination of the grammar each stack's
backend compiles, in the Doctor's workers, and the rows that differ.

Each side's grammar is that stack's own: ``maskscope``'s the in-process compile; a vLLM release's
tag from its own builder (a ``tools`` source), or the grammar its structured-output backend
handed xgrammar, with the options it passed (a schema, EBNF, regex or tag, as the release's
backend compiles it: :func:`app.suite.stacked.stack_compile`). The examinations run in the
Doctor's killable, memory-capped worker processes, bounded by their counts and safety stop, as
``POST /api/doctor``'s do: a hostile grammar never runs one in the server process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.engine import AnyEngine, GrammarSpec
from app.engine.stack_pins import MASKSCOPE, ServeFlags
from app.engine.stacks import runner
from app.engine.stacks.diff_doctor import DoctorChange, doctor_changes
from app.exceptions import CutShortByLoad, GrammarError
from app.suite.stacked import examined_grammar
from app.web.runtime.state import AppState
from app.web.services.examine import examined

__all__ = ["doctor_diff"]


async def doctor_diff(
    state: AppState,
    engine: AnyEngine,
    stacks: Sequence[str],
    specs: Sequence[GrammarSpec],
    serves: Sequence[ServeFlags],
    *,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> tuple[DoctorChange, ...]:
    """The Doctor's rows that differ between the grammars ``stacks`` (A then B) compile.

    Args:
        state: the app (its pools, the Doctor's workers).
        engine: the request model's engine.
        stacks: the two stacks.
        specs: each stack's source as Maskscope compiles it (a pasted request: as that stack
            derived it).
        serves: each stack's serve flags (its ``--structured-outputs-config``).
        disconnected: whether the client has left; a running examination is then stopped.

    Raises:
        RequestEnded: the client left; the examination was stopped.
    """
    sides = [
        await _examined(state, engine, stack, spec, serve, disconnected)
        for stack, spec, serve in zip(stacks, specs, serves, strict=True)
    ]
    return doctor_changes(*sides)


async def _examined(
    state: AppState,
    engine: AnyEngine,
    stack: str,
    spec: GrammarSpec,
    serve: ServeFlags,
    disconnected: Callable[[], Awaitable[bool]] | None,
) -> dict[str, Any]:
    """One side's Doctor answer, or why it could not be examined (the stack refuses the
    grammar, the examination ran past its memory cap or its safety stop)."""
    try:
        examining, examined_spec = await _stack_grammar(state, engine, stack, spec, serve)
        report = await examined(state, examining, examined_spec, disconnected=disconnected)
    except (GrammarError, CutShortByLoad) as error:
        return {"error": error.to_dict()}
    return report.to_dict()


async def _stack_grammar(
    state: AppState, engine: AnyEngine, stack: str, spec: GrammarSpec, serve: ServeFlags
) -> tuple[AnyEngine, GrammarSpec]:
    """The engine and grammar the Doctor examines for ``stack``
    (:func:`app.suite.stacked.examined_grammar`; the release's compile in the compile pool).

    Raises:
        GrammarError: the release refuses the grammar, or is unavailable.
    """
    if stack == MASKSCOPE:
        return engine, spec
    builder = runner(state.settings, stack)
    config = dict(serve.structured_outputs_config)
    return await state.pools.compiles.run(examined_grammar, engine, builder, spec, config)
