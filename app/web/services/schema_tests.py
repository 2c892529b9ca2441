"""Schema unit tests: compile the grammar, judge every test (also for permalinks holding tests)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from app.engine import AnyEngine
from app.schematests import SchemaTestResult, run_tests
from app.web.runtime.state import AppState
from app.web.schemas.bodies import GrammarIn, SchemaTestIn
from app.web.services import actions, walks

__all__ = ["run"]


async def run(
    state: AppState, engine: AnyEngine, grammar: GrammarIn, tests: Sequence[SchemaTestIn]
) -> list[SchemaTestResult]:
    """Compile the grammar and judge every test off the event loop (a Pydantic source's
    verdicts come from one sandbox process for the whole batch), under one walk budget
    (422 ``grammar_too_slow`` naming the test, stopped when the client leaves)."""
    compiled, resolved = await actions.compile_grammar(state, engine, grammar)
    validate = None
    if resolved.pydantic is not None:
        source, root_model = grammar.source, grammar.options.root_model
        validate = functools.partial(state.sandbox.validate_many, source, root_model)
    return await walks.walked(
        state,
        state.pools.replays,
        "the schema tests",
        run_tests,
        engine,
        compiled,
        [t.to_test() for t in tests],
        validate_many=validate,
    )
