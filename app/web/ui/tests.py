"""The page's Tests panel: its table, rendered for the form's grammar and the panel's tests."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.web.runtime.deps import StateDep
from app.web.schemas.forms import panel_tests_request
from app.web.services import schema_tests

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.post("/ui/tests", response_class=HTMLResponse)
async def tests_fragment(request: Request, state: StateDep) -> HTMLResponse:
    """The Tests panel's table for the form's grammar and the tests it sends (``tests``), with
    the picked model's tokenizer."""
    body, recorded = panel_tests_request(await request.form())
    engine = state.engine_for(body.model)
    results = await schema_tests.run(state, engine, body.grammar, body.tests)
    rows = [
        {"result": r, "recorded": was,
         "differs": was is not None and was != r.verdicts()}
        for r, was in zip(results, recorded, strict=True)
    ]  # fmt: skip
    html = state.render("partials/_tests_results.html", {"rows": rows})
    return HTMLResponse(html)
