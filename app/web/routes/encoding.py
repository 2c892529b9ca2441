"""JSON answers encoded off the event loop, for the routes whose answers hold step records."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi.responses import Response

__all__ = ["json_response"]


def _encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


async def json_response(body: Any, *, headers: dict[str, str] | None = None) -> Response:
    """JSON encoded off the event loop: every record of a session weighs tens of megabytes."""
    content = await asyncio.to_thread(_encode, body)
    return Response(content, media_type="application/json", headers=headers)
