"""Request ids and an access log line per request: ``id method path status ms``."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestLog"]

log = logging.getLogger("maskscope.access")
_GIVEN_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestLog:
    """Give each request an id (the client's ``X-Request-ID`` when sane), echo it in the
    response, keep it in ``request.state.request_id`` for error logs, and log the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _GIVEN_ID.match(given) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", request_id.encode())]  # fmt: skip
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            log.info("%s %s %s %s %.1fms", request_id, scope["method"], scope["path"], status,
                     elapsed)  # fmt: skip
