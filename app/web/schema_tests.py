"""Schema unit tests over HTTP: ``POST /api/tests``, also run for permalinks that hold tests."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter

from app.engine import AnyEngine
from app.schematests import SchemaTestResult, run_tests
from app.web import actions
from app.web.deps import StateDep
from app.web.models import GrammarIn, SchemaTestIn, SchemaTestsIn, check_test_sizes
from app.web.state import AppState

__all__ = ["router", "run"]

router = APIRouter()


async def run(
    state: AppState, engine: AnyEngine, grammar: GrammarIn, tests: Sequence[SchemaTestIn]
) -> list[SchemaTestResult]:
    """Compile the grammar and judge every test off the event loop (a Pydantic source's
    verdicts come from one sandbox process for the whole batch)."""
    compiled, resolved = await actions.compile_grammar(state, engine, grammar)
    validate = None
    if resolved.pydantic is not None:
        source, root_model = grammar.source, grammar.options.root_model
        validate = functools.partial(state.sandbox.validate_many, source, root_model)
    return await state.pools.replays.run(
        run_tests, engine, compiled, [t.to_test() for t in tests], validate_many=validate
    )


@router.post(
    "/api/tests",
    tags=["grammar"],
    responses={413: {"description": "a test's text is above 64 KiB, or longer than a replay"}},
)
async def schema_tests(body: SchemaTestsIn, state: StateDep) -> dict[str, Any]:
    """Run schema unit tests: each text is judged by the grammar (a replay; a JSON document also
    in the form the grammar writes it, ``normalized``, on which the test is judged) and by the
    schema (jsonschema, or the Pydantic model; null for EBNF and regex). A test passes when the
    grammar's verdict is the one expected; ``disagree`` flags grammar and schema differing."""
    check_test_sizes(body.tests)
    results = await run(state, state.engine_for(body.model), body.grammar, body.tests)
    return {"results": [r.to_dict() for r in results]}
