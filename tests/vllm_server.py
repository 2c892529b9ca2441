"""A real ``vllm serve`` (the CPU build in ``.venv-vllm``) for the remote-engine tests.

Starting one takes minutes on a small machine, so the test session starts it in the background
as soon as remote tests are collected, at the lowest CPU priority so that the tests running
meanwhile keep their speed, and the fixture that needs it waits for it to be ready and gives it
back a normal priority.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from app.engine.model.remote.launch import vllm_command, vllm_environment

__all__ = ["ARTIFACTS", "VLLM", "VllmServer"]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
#: The vllm executable: ``MASKSCOPE_TEST_VLLM``, else the project's own ``.venv-vllm``.
VLLM = Path(os.environ.get("MASKSCOPE_TEST_VLLM") or ROOT / ".venv-vllm" / "bin" / "vllm")
_BACKGROUND_NICE = 19


class VllmServer:
    """One ``vllm serve`` process (and its engine processes) on a loopback port.

    Args:
        name: names the log file in ``test-artifacts/``.
        model_dir: the checkpoint to serve.
        port: the loopback port.
        extra: more ``vllm serve`` arguments (a later flag overrides an earlier one).
    """

    def __init__(self, name: str, *, model_dir: str, port: int, extra: Sequence[str] = ()) -> None:
        self.name = name
        self.port = port
        self.root_url = f"http://127.0.0.1:{port}"
        self.url = f"{self.root_url}/v1"
        self.log_path = ARTIFACTS / f"vllm-{name}.log"
        self._command = vllm_command(
            vllm=str(VLLM), model_dir=model_dir, host="127.0.0.1", port=port
        ) + list(extra)
        self._process: subprocess.Popen[bytes] | None = None
        # The server's pid when another process of the test run started it (attach()).
        self._attached_pid: int | None = None

    @classmethod
    def attach(
        cls, name: str, *, model_dir: str, port: int, pid: int, extra: Sequence[str] = ()
    ) -> VllmServer:
        """The server that another process of the test run started (the xdist controller):
        this one waits for it and uses it, and never stops it."""
        server = cls(name, model_dir=model_dir, port=port, extra=extra)
        server._attached_pid = pid
        return server

    @property
    def pid(self) -> int:
        """The server's pid (its process group's id too)."""
        if self._attached_pid is not None:
            return self._attached_pid
        assert self._process is not None, "start() first"
        return self._process.pid

    def start(self) -> None:
        """Launch the server in its own process group, niced; returns at once."""
        assert VLLM.exists(), f"{VLLM} is missing: run `make vllm-install` (`make test` does)"
        ARTIFACTS.mkdir(exist_ok=True)
        # A niced start-up may wait longer than vLLM's default 600 s for its engine process.
        environment = vllm_environment(os.environ) | {"VLLM_ENGINE_READY_TIMEOUT_S": "3600"}
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self._command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
        # Set before vLLM forks its engine processes (its imports take seconds): they inherit it.
        os.setpriority(os.PRIO_PROCESS, self._process.pid, _BACKGROUND_NICE)

    def wait_ready(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` more for ``GET /health`` to answer 200; fail with the log's
        tail if it does not."""
        try:  # back to a normal priority, for the whole group, now that tests wait for it
            os.setpriority(os.PRIO_PGRP, self.pid, 0)
        except PermissionError:  # lowering a nice value needs CAP_SYS_NICE: stay niced
            pass
        except ProcessLookupError:  # exited already: said below
            pass
        # Counted from now: a server started in the background may have waited for a long suite.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (exited := self._exited()) is not None:
                raise AssertionError(f"vllm serve exited ({exited}):\n{self._tail()}")
            try:
                if httpx.get(f"{self.root_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"vllm serve was not ready after {timeout_s:.0f} s:\n{self._tail()}")

    def _exited(self) -> str | None:
        """How the server exited (its status, or "gone"), or None while it runs."""
        if self._process is not None:
            code = self._process.poll()
            return None if code is None else str(code)
        # Another process's child: gone, or a zombie its parent has not reaped yet.
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return "gone"
        return "gone" if state in ("Z", "X") else None

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after 20 s (a server this process
        only attached to is left to the process that started it)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def _tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
