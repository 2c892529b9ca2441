"""Start ``python -m app serve`` on a free loopback port for a benchmark, and stop it after."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def live_server(env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Serve the app in a subprocess; yields (base URL, server pid) once ``/readyz`` says 200."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)], cwd=ROOT,
        env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not become ready"
            try:
                if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield base, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)
