"""A real HTTP listener on 127.0.0.1 that counts every connection it accepts.

A test that hands a schema a reference to it asserts that no connection arrived: a fetch, even
one that failed before sending a request, is an accepted connection.
"""

from __future__ import annotations

import http.server
import socket
import threading
from types import TracebackType
from typing import Any

__all__ = ["Listener"]

SECRET_BODY = b'{"const": "LISTENER-SECRET-7f3a"}'


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(SECRET_BODY)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        pass


class _CountingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0

    def verify_request(
        self, request: socket.socket | tuple[bytes, socket.socket], address: Any
    ) -> bool:
        self.connections += 1
        return True


class Listener:
    """Serves ``SECRET_BODY`` at ``url`` in a thread; ``connections`` counts accepted ones."""

    secret = SECRET_BODY.decode()

    def __init__(self) -> None:
        self._server = _CountingServer()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/secret.json"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def connections(self) -> int:
        """How many connections the listener has accepted."""
        return self._server.connections

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
