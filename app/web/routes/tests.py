"""Schema unit tests over HTTP: ``POST /api/tests``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import SchemaTestsIn, check_test_sizes
from app.web.services.schema_tests import run

__all__ = ["router"]

router = APIRouter()


@router.post(
    "/api/tests",
    tags=["grammar"],
    responses={413: {"description": "a test's text is above 64 KiB, or longer than a replay"}},
)
async def schema_tests(body: SchemaTestsIn, state: StateDep) -> dict[str, Any]:
    """Run schema unit tests: each text is judged by the grammar (a replay; a JSON document also
    in the form the grammar writes it, ``normalized``, on which the test is judged) and by the
    schema (jsonschema, or the Pydantic model; null for EBNF and regex). A test passes when the
    grammar's verdict is the one expected; ``disagree`` flags grammar and schema differing. The
    tests' walks share ``MASKSCOPE_WALK_BUDGET_S`` of CPU (422 ``grammar_too_slow`` beyond, its
    pointer naming the test)."""
    check_test_sizes(body.tests)
    results = await run(state, state.engine_for(body.model), body.grammar, body.tests)
    return {"results": [r.to_dict() for r in results]}
