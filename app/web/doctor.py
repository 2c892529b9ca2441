"""The Doctor over HTTP: ``POST /api/doctor``, and what the page's Doctor tab needs."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter

from app.doctor import Doctor, DoctorReport, PydanticSource, Status
from app.engine import AnyEngine
from app.web import actions
from app.web.deps import StateDep
from app.web.models import DoctorIn
from app.web.state import AppState

__all__ = ["editor_marks", "examine", "router"]

router = APIRouter()


async def examine(state: AppState, engine: AnyEngine, body: DoctorIn) -> DoctorReport:
    """Resolve the grammar request (Pydantic through the sandbox) and examine it off the loop."""
    resolved = await actions.resolve(state, body.grammar)
    pydantic = None
    if resolved.pydantic is not None:
        source, root_model = body.grammar.source, body.grammar.options.root_model
        validate = functools.partial(state.sandbox.validate_many, source, root_model)
        pydantic = PydanticSource(source, resolved.pydantic.root, validate)
    return await state.pools.doctors.run(
        Doctor.of(engine).examine,
        resolved.spec,
        seed=body.seed,
        budget_ms=body.budget_ms,
        pydantic=pydantic,
        max_tokens=body.max_tokens,
    )


def editor_marks(report: DoctorReport) -> list[dict[str, Any]]:
    """Lint marks for the editor: each ignored or weakened keyword that has a line."""
    return [
        {"line": k.line, "severity": "warning",
         "message": f"{k.keyword} {k.status.value} by xgrammar: {k.detail}"}
        for k in report.keywords
        if k.line is not None and k.status in (Status.IGNORED, Status.WEAKENED)
    ]  # fmt: skip


@router.post("/api/doctor", tags=["grammar"])
async def doctor(body: DoctorIn, state: StateDep) -> dict[str, Any]:
    """Examine a grammar: each keyword enforced, ignored, weakened or warned; witnesses (documents
    on which grammar and schema disagree); what vLLM, SGLang, llguidance and OpenAI's strict mode
    do with it; and its costs. EBNF and regex get the costs and the llguidance row only."""
    report = await examine(state, state.engine_for(body.model), body)
    return report.to_dict()
