"""A loopback TCP relay in front of a real server, to take the server away and bring it back.

Restarting vLLM costs minutes; closing this relay's port gives the client the same thing a
stopped server does (connections refused, open ones closed), and stalling it gives what a hung
server does (connections accepted, no answer).
"""

from __future__ import annotations

import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """Relays ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>`` until told otherwise.

    Args:
        target_port: where the real server listens.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stalled = False
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self.root_url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Close the port and every open connection: a stopped server."""
        # shutdown() wakes the thread blocked in accept(); close() alone leaves it listening.
        _close(self._listener)
        with self._lock:
            for sock in self._sockets:
                _close(sock)
            self._sockets.clear()

    def start(self) -> None:
        """Listen on the same port again and relay: the server is back."""
        self.stop()
        self._stalled = False
        self._listener = self._listen(self.port)

    def stall(self) -> None:
        """Accept connections but never answer: a hung server. ``stop`` ends it."""
        self.stop()
        self._stalled = True
        self._listener = self._listen(self.port)

    def _listen(self, port: int) -> socket.socket:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
            if self._stalled:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets.append(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
