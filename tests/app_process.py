"""``python -m app serve`` as a process of its own, for what only a real process shows: its
signals (SIGTERM, kill -9), a reverse proxy in front of it, replicas on one database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.artifacts import artifact_path
from tests.conftest import free_port

__all__ = ["ARTIFACTS", "ROOT", "AppProcess"]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
_START_S = 300.0


class AppProcess:
    """One ``python -m app serve`` on a loopback port, in its own process group (with its worker
    processes), logging to ``test-artifacts/``.

    Args:
        name: names its log file.
        env: ``MASKSCOPE_*`` settings on top of the tests' environment.
        port: the loopback port (a free one when not given).
    """

    def __init__(self, name: str, *, env: Mapping[str, str], port: int | None = None) -> None:
        self.name = name
        self.port = free_port() if port is None else port
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.log_path = artifact_path(f"app-{name}")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> None:
        """Launch it and, unless ``wait`` is false, wait until it is ready (:meth:`wait_ready`)."""
        ARTIFACTS.mkdir(exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--port", str(self.port)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = _START_S) -> None:
        """Wait until ``/readyz`` answers 200 (the model is loaded)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the server exited:\n{self.log_tail()}"
            try:
                if httpx.get(self.url + "/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"the server was not ready in {timeout_s:g} s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """Send SIGTERM to the server (returns at once)."""
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

    def kill(self) -> None:
        """SIGKILL the server and its workers at once (kill -9: nothing is flushed or closed)."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone already
            pass
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Kill it and its workers, if it was started (what a test leaves behind)."""
        if self.process is not None:
            self.kill()

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
