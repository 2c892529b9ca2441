"""An ASGI middleware that refuses request bodies past a size (413), streamed or not; the
page's requests get the error as the page shows errors (app/web/errors.py: in the panel that
asked, or the toast)."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.errors import error_response, size_in_kb

__all__ = ["BodyLimit"]


class BodyLimit:
    """Answer 413 when a body declares or streams more than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _message(self, size: int | None = None) -> str:
        limit = f"the {size_in_kb(self.max_bytes)} limit ({self.max_bytes:,} bytes)"
        if size is None:
            return f"the request body is over {limit}"
        return f"the request body is {size_in_kb(size)}: over {limit}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            error = {"message": self._message(int(declared)), "code": "too_large"}
            if dict(scope["headers"]).get(b"hx-request") == b"true" and "app" in scope:
                await error_response(Request(scope), 413, error)(scope, receive, send)
                return
            body = json.dumps({"error": error})
            await send({"type": "http.response.start", "status": 413,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body.encode()})
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)
