"""The Suite view: the upload form (``/suites``), a suite's progress and table
(``/suites/{id}``, a permalink), and a row opened in the playground (``/suites/{id}/open``)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.engine import PRESETS
from app.engine.stack_pins import MASKSCOPE, configured
from app.exceptions import GrammarError, InvalidInput, PermalinkNotFound, TooLarge
from app.settings import LOCAL_MODEL_ID
from app.suite import SuiteReport
from app.web.errors import not_found_page
from app.web.middleware.rootpath import url
from app.web.runtime import quota
from app.web.runtime.deps import StateDep
from app.web.runtime.state import AppState
from app.web.schemas.bodies import PermalinkIn
from app.web.services import permalinks as sharing
from app.web.services import suite_table, suites

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _runs(request: Request, state: AppState) -> suites.SuiteRuns:
    return suites.runs_of(state, request.app.state)


def _page(
    request: Request, state: AppState, name: str, context: dict[str, Any], status: int = 200
) -> HTMLResponse:
    identity = state.engine.model.identity.to_dict() if state.engine is not None else None
    footer = {"identity": identity, "model_id": LOCAL_MODEL_ID}
    response: HTMLResponse = state.templates.TemplateResponse(
        request, name, {**footer, **context}, status_code=status
    )
    return response


@router.get("/suites", response_class=HTMLResponse)
async def upload_page(request: Request, state: StateDep) -> HTMLResponse:
    """The Suite view's upload form."""
    caps = {
        "upload": state.settings.suite_max_upload_bytes,
        "sources": state.settings.suite_max_sources,
    }
    stacks = [MASKSCOPE, *configured(state.settings)]
    context = {"suite": None, "caps": caps, "presets": list(PRESETS), "stacks": stacks}
    return _page(request, state, "pages/suite.html", context)


@router.get("/suites/{suite_id}", response_class=HTMLResponse)
async def suite_page(request: Request, state: StateDep, suite_id: str) -> HTMLResponse:
    """A suite: its progress while it is checked, then its table (a permalink: reopened from
    the store once checked)."""
    try:
        found = await suites.found(state, _runs(request, state), suite_id)
    except PermalinkNotFound:
        return _page(
            request,
            state,
            "pages/not_found.html",
            {"message": "No suite has this id: check the link, or upload the suite again."},
            status=404,
        )
    report = SuiteReport.from_dict(found["report"])
    cols = suite_table.columns(found["stacks"], found["engines"])
    context = {
        "suite": found,
        "columns": cols,
        "rows": suite_table.rows(report, found["sources"], cols),
        "levels": [level.value for level in report.fail_on],
        "caps": {},
        "presets": [],
    }
    return _page(request, state, "pages/suite.html", context)


def _source(
    run: suites.SuiteRun | None, content: dict[str, Any] | None, name: str
) -> dict[str, Any] | None:
    if run is not None:
        return next(
            (
                {"name": s.name, "kind": s.kind, "text": s.text, "tests": s.tests}
                for s in run.sources
                if s.name == name
            ),
            None,
        )
    assert content is not None
    return next((s for s in content["sources"] if s["name"] == name), None)


def _tests(lines: str | None) -> list[dict[str, Any]]:
    """A source's unit tests as a permalink keeps them (none when they do not read)."""
    tests = []
    for line in (lines or "").splitlines():
        try:
            test = json.loads(line) if line.strip() else None
        except ValueError:
            return []
        if test is not None:
            if not isinstance(test, dict) or set(test) - {"text", "expect"}:
                return []
            tests.append(test)
    return tests


@router.get("/suites/{suite_id}/open")
async def open_source(
    request: Request,
    state: StateDep,
    suite_id: str,
    source: Annotated[str, Query(max_length=4096)],
    engine: Annotated[str, Query(max_length=32)] = "xgrammar",
) -> Response:
    """A source of the suite opened in the playground: a permalink of it (its source, kind,
    preset, engine and unit tests; equal content, an equal link) and a redirect there, where it
    compiles and the Doctor marks its findings in the editor."""
    run = _runs(request, state).get(suite_id)
    try:
        content = (
            None if run is not None else await asyncio.to_thread(suites.stored, state, suite_id)
        )
    except PermalinkNotFound:
        return not_found_page(request, "No suite has this id: check the link.")
    found = _source(run, content, source)
    if found is None or found["text"] is None:
        return not_found_page(request, f"The suite has no readable source {source!r}.")
    preset = run.options.preset if run is not None else (content or {})["options"]["preset"]
    grammar = {
        "kind": found["kind"],
        "source": found["text"],
        "options": {"preset": preset},
        "engine": engine if engine in ("xgrammar", "llguidance") else "xgrammar",
    }
    body = {
        "grammar": grammar,
        "messages": [{"role": "system", "content": "Reply with JSON only."}],
        "schema_in_prompt": True,
    }
    client = quota.admit_permalink(state.permalink_quota)
    try:
        permalink = PermalinkIn.model_validate({**body, "tests": _tests(found["tests"])})
        snapshot_id, created = await sharing.share_request(state, permalink)
    except (ValueError, InvalidInput, TooLarge, GrammarError):
        # Tests the link cannot keep (bad lines, too large, too slow): opened without them.
        snapshot_id, created = await sharing.share_request(state, PermalinkIn.model_validate(body))
    if created:
        await quota.charge_permalink(state.permalink_quota, state.store, client, snapshot_id)
    return RedirectResponse(url(f"/s/{snapshot_id}"), status_code=303)
