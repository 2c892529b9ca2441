"""Code export over HTTP: ``/api/export``, a snippet for a serving stack."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.export import TARGETS, export
from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import CompileIn, GrammarIn, SessionIn
from app.web.services import export as export_service

__all__ = ["ExportOut", "router"]

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
    req = await export_service.export_request(state, _session_body(data))
    return export(req, target).to_dict()


@router.get("/api/export", tags=["export"], response_model=ExportOut)
async def export_get(
    target: TargetQuery,
    session: Annotated[str, Query(max_length=64, description="an open session's id")],
    state: StateDep,
) -> dict[str, Any]:
    """The snippet for ``target`` that reproduces an open session."""
    req = await export_service.from_session(state, state.sessions.get(session))
    return export(req, target).to_dict()
