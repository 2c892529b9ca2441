"""Who a request is for: the client's address, the key that sessions and queues share fairly by.

An ASGI middleware keeps ``scope["client"]`` (``request.client.host``) in a context variable for
the rest of the request, so the pools read it without every use case passing it along; a pool
copies the context to its threads, so work done there is counted for the same client.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["UNKNOWN", "ClientIdentity", "acting_for", "current_client"]

#: The client of work done outside a request (the CLI, start-up), or of a request without a peer.
UNKNOWN = "unknown"

_CLIENT: ContextVar[str] = ContextVar("maskscope_client", default=UNKNOWN)


def current_client() -> str:
    """The address of the client the current request (or the work it started) is for."""
    return _CLIENT.get()


@contextmanager
def acting_for(client: str) -> Iterator[None]:
    """Count the work done inside the block for ``client``."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)


class ClientIdentity:
    """Set :func:`current_client` to ``scope["client"]``'s host for each HTTP request.

    It reads the scope when the request reaches it: added first in ``create_app`` (innermost),
    it sees the address a trusted-proxy middleware put there from ``X-Forwarded-For``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = scope.get("client")
        with acting_for(str(peer[0]) if peer else UNKNOWN):
            await self.app(scope, receive, send)
