"""The page's Code dialog: every target's snippet for the open session, else for the form."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse

from app.exceptions import GrammarError, InvalidInput, SessionGone, SessionNotFound
from app.export import TARGETS, export
from app.web.runtime.deps import StateDep
from app.web.runtime.state import AppState
from app.web.schemas.forms import form_session_request
from app.web.services import export as export_service

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _dialog_error(state: AppState, error: dict[str, Any]) -> HTMLResponse:
    return HTMLResponse(state.render("partials/_error.html", {"error": error}))


@router.post("/ui/export", response_class=HTMLResponse)
async def export_dialog(request: Request, state: StateDep) -> HTMLResponse:
    """Every target's snippet for the Code dialog: the open session's, else the form's."""
    form = await request.form()
    req = None
    session_id = str(form.get("session") or "")
    if session_id:
        try:
            req = await export_service.from_session(state, state.sessions.get(session_id))
        except (SessionGone, SessionNotFound):
            req = None  # it ended: the form holds the same settings
    try:
        if req is None:
            req = await export_service.export_request(state, form_session_request(form))
    except (GrammarError, InvalidInput) as error:  # shown in the dialog, which hides the toast
        return _dialog_error(state, error.to_dict())
    except RequestValidationError as error:
        first = error.errors()[0]
        where = "/".join(str(part) for part in first["loc"])
        return _dialog_error(state, {"message": f"{where}: {first['msg']}", "code": "invalid"})
    snippets = [export(req, target) for target in TARGETS]
    return HTMLResponse(state.render("partials/_export.html", {"snippets": snippets}))
