"""``python -m app serve`` as a process of its own, for what only a real process shows: its
signals (SIGTERM), and a reverse proxy in front of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

__all__ = ["ARTIFACTS", "AppProcess"]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
_START_S = 180.0


class AppProcess:
    """One ``python -m app serve`` on a loopback port, logging to ``test-artifacts/``.

    Args:
        name: names its log file.
        port: the loopback port.
        env: ``MASKSCOPE_*`` settings on top of the tests' environment.
    """

    def __init__(self, name: str, *, port: int, env: Mapping[str, str]) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env = dict(env)
        self.log_path = ARTIFACTS / f"app-{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until ``/readyz`` answers 200 (the model is loaded)."""
        ARTIFACTS.mkdir(exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--port", str(self.port)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            )  # fmt: skip
        deadline = time.monotonic() + _START_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the server exited:\n{self.log_tail()}"
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"the server was not ready in {_START_S:g} s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """Send SIGTERM (returns at once)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int:
        """Its exit status, once it has exited; fails if it is still there after ``timeout_s``
        (a liveness bound, not a speed target)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the server was still running {timeout_s:g} s after SIGTERM:\n{self.log_tail()}"
            ) from None

    def stop(self) -> None:
        """Kill it if it still runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
