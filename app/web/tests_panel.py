"""The page's Tests panel: its table, rendered for the form's grammar and the panel's tests."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.web import pages, schema_tests
from app.web.deps import StateDep
from app.web.models import SchemaTestsIn, check_test_sizes, listed_tests

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.post("/ui/tests", response_class=HTMLResponse)
async def tests_fragment(request: Request, state: StateDep) -> HTMLResponse:
    """The Tests panel's table for the form's grammar and the tests it sends (``tests``), with
    the picked model's tokenizer."""
    form = await request.form()
    listed, recorded = listed_tests(str(form.get("tests") or ""))
    body: SchemaTestsIn = pages._validated(
        SchemaTestsIn,
        {"grammar": pages._grammar(form), "model": pages._model(form), "tests": listed},
    )
    check_test_sizes(body.tests)
    engine = state.engine_for(body.model)
    results = await schema_tests.run(state, engine, body.grammar, body.tests)
    rows = [
        {"result": r, "recorded": was,
         "differs": was is not None and was != r.verdicts()}
        for r, was in zip(results, recorded, strict=True)
    ]  # fmt: skip
    html = state.render("partials/_tests_results.html", {"rows": rows})
    return HTMLResponse(html)
