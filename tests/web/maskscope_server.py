"""``python -m app serve`` as a real process on a free port, for the team tests (replicas on one
database, kill -9 during writes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.conftest import free_port

__all__ = ["ARTIFACTS", "MaskscopeServer"]

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts"


class MaskscopeServer:
    """One server process (in its own process group, with its worker processes).

    Args:
        name: names its log in ``test-artifacts/``.
        env: ``MASKSCOPE_*`` variables on top of the test run's environment.
    """

    def __init__(self, name: str, env: Mapping[str, str]) -> None:
        self.name = name
        self.env = {**os.environ, "MASKSCOPE_COMPILE_WORKERS": "1", **env}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = ARTIFACTS / f"maskscope-{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Launch it; returns at once (see :meth:`wait_ready`)."""
        ARTIFACTS.mkdir(exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--port", str(self.port)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Wait until ``/readyz`` says the model is loaded."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.process.poll() is None, f"{self.name} exited: see {self.log_path}"
            assert time.monotonic() < deadline, f"{self.name} is not ready: see {self.log_path}"
            time.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL the server and its workers at once (kill -9: nothing is flushed or closed)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL if it lingers), its workers too."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        try:  # workers left behind by the parent
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
