"""``GET /metrics``: the app's Prometheus metrics (:mod:`app.web.runtime.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.web.runtime.deps import StateDep
from app.web.runtime.metrics import CONTENT_TYPE

__all__ = ["router"]

router = APIRouter()


@router.get(
    "/metrics",
    tags=["health"],
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus' text format"}},
)
async def metrics(state: StateDep) -> Response:
    """Queue depths, work latencies and outcomes, sessions, the models' readiness, in
    Prometheus' text format. On the event loop: it reads the live sessions as they are."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
