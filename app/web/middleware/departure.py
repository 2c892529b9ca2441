"""Whether a request's client is still there, for the work the request started.

uvicorn never cancels a handler whose client leaves: a sandbox process or a walk on a pool thread
would run on for nobody. An ASGI middleware watches the connection once the handler has read the
whole body, and if the client goes before the answer is sent, it sets the request's flag and runs
the callbacks registered for it (on the event loop). A use case registers what stops its work
with :func:`on_client_leaving`, or hands :func:`client_left` (an event a worker thread may poll)
to its work. A request whose handler never reads its body (a GET) is not watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ClientDeparture", "Departure", "client_left", "on_client_leaving"]

log = logging.getLogger(__name__)

_CURRENT: ContextVar[Departure | None] = ContextVar("maskscope_departure", default=None)


class Departure:
    """One request's client leaving: the flag, and what to run when it is set."""

    def __init__(self) -> None:
        self.left = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []

    def add(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` when the client leaves (at once if it has); returns its removal."""
        with self._lock:
            if not self.left.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], object]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    def leave(self) -> None:
        """Mark the client gone and run the callbacks (once; one that fails is logged)."""
        with self._lock:
            if self.left.is_set():
                return
            self.left.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failure must not keep the other work running
                log.exception("a callback for a client that left failed")


def client_left() -> threading.Event | None:
    """The current request's flag, set when its client leaves (None outside a request)."""
    departure = _CURRENT.get()
    return departure.left if departure is not None else None


@contextlib.contextmanager
def on_client_leaving(callback: Callable[[], object]) -> Iterator[None]:
    """Run ``callback`` if the current request's client leaves while the block runs (at once if
    it has left already); outside a watched request, nothing."""
    departure = _CURRENT.get()
    remove = departure.add(callback) if departure is not None else None
    try:
        yield
    finally:
        if remove is not None:
            remove()


class ClientDeparture:
    """Give each HTTP request a :class:`Departure`, set when its client leaves before the
    answer is complete (an ``http.disconnect`` once the body was read)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        departure = Departure()
        answered = False
        watcher: asyncio.Future[None] | None = None

        def seen(message: Message) -> None:
            if message["type"] == "http.disconnect" and not answered:
                departure.leave()

        async def watch() -> None:
            while True:
                try:
                    message = await receive()
                except Exception:  # the server ended the exchange: nothing more to learn
                    return
                seen(message)
                if message["type"] == "http.disconnect":
                    return

        async def receive_watched() -> Message:
            nonlocal watcher
            message = await receive()
            seen(message)
            body_read = message["type"] == "http.request" and not message.get("more_body", False)
            if body_read and watcher is None:  # only a disconnect can come now
                watcher = asyncio.ensure_future(watch())
            return message

        async def send_watched(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True  # first: the server's next receive says "disconnect" then
            await send(message)

        token = _CURRENT.set(departure)
        try:
            await self.app(scope, receive_watched, send_watched)
        finally:
            _CURRENT.reset(token)
            if watcher is not None:
                watcher.cancel()
