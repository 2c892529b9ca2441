"""Code export: ``/api/export`` and the page's Code dialog."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ValidationError

from app.doctor.backends import vllm as vllm_rules
from app.engine import render_prompt
from app.exceptions import GrammarError, InvalidInput, SessionGone, SessionNotFound
from app.export import TARGETS, ExportRequest, Message, PydanticSource, Sampling, export
from app.sandbox.sandbox import PydanticSchema
from app.settings import EMBEDDED_HF_ID, EMBEDDED_MODEL, Settings
from app.web import actions
from app.web.deps import StateDep
from app.web.models import CompileIn, GrammarIn, SessionIn
from app.web.pages import form_session_request
from app.web.sessions import SessionHandle
from app.web.state import AppState

__all__ = ["export_request", "router", "served_model"]

router = APIRouter()

Target = Literal[
    "vllm",
    "vllm_legacy",
    "sglang",
    "sglang_openai",
    "openai",
    "xgrammar",
    "llguidance",
    "curl_vllm",
    "curl_sglang",
    "curl_openai",
]
assert set(Target.__args__) == set(TARGETS)  # type: ignore[attr-defined]
TargetQuery = Annotated[Target, Query(description="the serving stack to write the request for")]

_BODY_SCHEMA = {
    "content": {
        "application/json": {
            "schema": {
                "anyOf": [
                    {"$ref": "#/components/schemas/SessionIn"},
                    {"$ref": "#/components/schemas/GrammarIn"},
                ]
            }
        }
    },
    "required": True,
}


def served_model(settings: Settings) -> str:
    """The name a server serves the configured model under (the hub id for the embedded one)."""
    return EMBEDDED_HF_ID if settings.model == EMBEDDED_MODEL else settings.model


def _session_body(data: dict[str, Any]) -> SessionIn:
    """A session request, or a grammar request taken as a session request with no prompt."""
    try:
        if "grammar" not in data:
            grammar = CompileIn.model_validate(data)
            return SessionIn(
                grammar=GrammarIn.model_validate(grammar.model_dump(exclude={"model"})),
                model=grammar.model,
            )
        return SessionIn.model_validate(data)
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None


def _schema(source: str) -> Any:
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        raise GrammarError(
            f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno, pointer="/grammar/source"
        ) from None


async def export_request(
    state: AppState, body: SessionIn, *, prompt_text: str | None = None
) -> ExportRequest:
    """What the snippets reproduce: the grammar as compiled, options, prompt, sampling.

    Args:
        state: the app (its sandbox derives a Pydantic source's schema).
        body: the session request (a grammar request has no messages); its ``model`` renders
            the chat template when ``prompt_text`` is not given, and names the served model.
        prompt_text: the prompt a live session rendered.
    """
    engine = state.engine_for(body.model)
    resolved = await actions.resolve(state, body.grammar)
    spec = resolved.spec
    messages = body.chat_messages(spec) if body.raw_prompt is None else []
    if prompt_text is None and messages:
        rendered = await asyncio.to_thread(render_prompt, engine.model.tokens, messages)
        prompt_text = rendered.text
    derived = resolved.pydantic
    sampling = body.sampling
    schema = _schema(spec.source) if spec.is_json else None
    return ExportRequest(
        kind=spec.kind,
        source=spec.source,
        schema=schema,
        options=spec.options,
        preset=body.grammar.options.preset,
        model=engine.model.identity.served_name or served_model(state.settings),
        messages=tuple(Message(m.role, m.content) for m in messages),
        raw_prompt=body.raw_prompt,
        prompt_text=prompt_text,
        sampling=Sampling(sampling.temperature, sampling.top_p, sampling.seed),
        max_tokens=body.max_tokens,
        pydantic=_pydantic(derived),
        vllm_fallback=_vllm_fallback(schema) if spec.is_json else None,
    )


def _pydantic(derived: PydanticSchema | None) -> PydanticSource | None:
    """What the snippets may carry of a Pydantic source: the source the sandbox ran (methods
    removed), never the request's text, whose validators the sandbox never ran."""
    if derived is None:
        return None
    return PydanticSource(derived.ran, derived.root, derived.stripped)


def _vllm_fallback(schema: Any) -> str | None:
    """The Doctor's reasons vLLM's ``auto`` would not give this schema to xgrammar, or None."""
    reasons = vllm_rules.unsupported(schema)
    if not reasons:
        return None
    return "; ".join(f"{r.message} at {r.pointer or '/'}" for r in reasons)


async def _from_session(state: AppState, handle: SessionHandle) -> ExportRequest:
    body = SessionIn.model_validate(handle.request)
    return await export_request(state, body, prompt_text=handle.session.prompt.text)


class ExportOut(BaseModel):
    """A snippet and what its target cannot express."""

    target: str
    language: Literal["python", "bash"]
    code: str
    not_expressible: list[str]


@router.post(
    "/api/export",
    tags=["export"],
    openapi_extra={"requestBody": _BODY_SCHEMA},
    response_model=ExportOut,
)
async def export_post(
    target: TargetQuery,
    data: Annotated[dict[str, Any], Body()],
    state: StateDep,
) -> dict[str, Any]:
    """The snippet for ``target`` from a session request or a grammar request (in the body: a
    256 KiB source does not fit in a URL)."""
    req = await export_request(state, _session_body(data))
    return export(req, target).to_dict()


@router.get("/api/export", tags=["export"], response_model=ExportOut)
async def export_get(
    target: TargetQuery,
    session: Annotated[str, Query(max_length=64, description="an open session's id")],
    state: StateDep,
) -> dict[str, Any]:
    """The snippet for ``target`` that reproduces an open session."""
    req = await _from_session(state, state.sessions.get(session))
    return export(req, target).to_dict()


def _dialog_error(state: AppState, error: dict[str, Any]) -> HTMLResponse:
    return HTMLResponse(state.render("partials/_error.html", {"error": error}))


@router.post("/ui/export", response_class=HTMLResponse, include_in_schema=False)
async def export_dialog(request: Request, state: StateDep) -> HTMLResponse:
    """Every target's snippet for the Code dialog: the open session's, else the form's."""
    form = await request.form()
    req = None
    session_id = str(form.get("session") or "")
    if session_id:
        try:
            req = await _from_session(state, state.sessions.get(session_id))
        except (SessionGone, SessionNotFound):
            req = None  # it ended: the form holds the same settings
    try:
        if req is None:
            req = await export_request(state, form_session_request(form))
    except (GrammarError, InvalidInput) as error:  # shown in the dialog, which hides the toast
        return _dialog_error(state, error.to_dict())
    except RequestValidationError as error:
        first = error.errors()[0]
        where = "/".join(str(part) for part in first["loc"])
        return _dialog_error(state, {"message": f"{where}: {first['msg']}", "code": "invalid"})
    snippets = [export(req, target) for target in TARGETS]
    return HTMLResponse(state.render("partials/_export.html", {"snippets": snippets}))
