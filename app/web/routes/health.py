"""Health checks: ``/healthz`` while the process serves, ``/readyz`` once the model is loaded."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.web.runtime.deps import StateDep

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    """200 while the process serves."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"], responses={503: {"description": "the model is loading"}})
async def readyz(state: StateDep) -> JSONResponse:
    """200 once the model is loaded, 503 before (or if it failed to load); both say the
    containment level of the Pydantic sandbox (``full``, ``seccomp`` or ``none``)."""
    sandbox = (await asyncio.to_thread(lambda: state.sandbox.level)).value
    if state.engine is None:
        reason = (
            f"the model failed to load: {state.load_error}"
            if state.load_error
            else ("the model is loading")
        )
        body = {"error": {"message": reason, "code": "not_ready"}, "sandbox": sandbox}
        return JSONResponse(body, status_code=503)
    return JSONResponse(
        {"status": "ready", "model": state.engine.model.identity.to_dict(), "sandbox": sandbox}
    )
