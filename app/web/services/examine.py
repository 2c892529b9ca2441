"""Examining a grammar with the Doctor, for ``POST /api/doctor`` and the page's Doctor tab."""

from __future__ import annotations

import functools
from typing import TypedDict

from app.doctor import Doctor, DoctorReport, PydanticSource, Status
from app.engine import AnyEngine
from app.web.bodies import DoctorIn
from app.web.services import actions
from app.web.state import AppState

__all__ = ["EditorMark", "editor_marks", "examine"]


class EditorMark(TypedDict):
    """A lint mark the editor shows on a line."""

    line: int
    severity: str
    message: str


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


def editor_marks(report: DoctorReport) -> list[EditorMark]:
    """Lint marks for the editor: each ignored or weakened keyword that has a line."""
    return [
        {"line": k.line, "severity": "warning",
         "message": f"{k.keyword} {k.status.value} by xgrammar: {k.detail}"}
        for k in report.keywords
        if k.line is not None and k.status in (Status.IGNORED, Status.WEAKENED)
    ]  # fmt: skip
