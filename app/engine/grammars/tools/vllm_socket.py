"""A stack's runner shared by every Maskscope process of its user: a unix socket in a private
directory.

The first process that needs the stack starts its runner (``vllm_runner.py --socket``) under an
exclusive file lock, so that two never start it at once, and counts the start in ``starts``; every
later call, from the server or another CLI call, connects to the socket and finds it warm. The
directory is created ``0700`` and refused when another user owns it or can open it. The runner
answers one request per connection, in order, and exits after ``idle_s`` seconds without one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.engine.grammars.tools.vllm_process import RunnerDied, RunnerProcess, stderr_tail
from app.exceptions import GrammarError, GrammarTooComplex

__all__ = ["SocketRunner", "runner_directory", "start_count", "start_lock"]

SOCKET = "runner.sock"
LOG = "runner.log"
STARTS = "starts"


def _private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise GrammarError(
            f"the stack runners' directory {path.name} is not this user's alone (owner "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}): remove it or set "
            "MASKSCOPE_STACK_RUNNER_DIR"
        )
    return path


def runner_directory(base: Path | None, key: str) -> Path:
    """The private directory of one runner (``key`` names the stack and its settings).

    Raises:
        GrammarError: the directory exists and is not this user's alone.
    """
    if base is None:
        root = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
        base = root / f"maskscope-{os.getuid()}"
    return _private(_private(base) / key)


@contextlib.contextmanager
def start_lock(directory: Path) -> Iterator[None]:
    """Held while a runner is started in ``directory`` (by any process)."""
    with (directory / "start.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start_count(directory: Path, *, add: bool = False) -> int:
    """How many runners were started in ``directory`` (``add``: one more, counted now)."""
    path = directory / STARTS
    count = int(path.read_text() or 0) if path.is_file() else 0
    if add:
        count += 1
        path.write_text(str(count))
    return count


class SocketRunner:
    """A runner listening on ``directory``'s socket.

    Args:
        directory: its private directory.
        hello: what it said it is (``{"versions", "pid"}``).
        process: the process, when this process started it (reaped on :meth:`kill`).
    """

    def __init__(
        self, directory: Path, hello: dict[str, Any], process: RunnerProcess | None = None
    ) -> None:
        self.directory = directory
        self.pid = int(hello["pid"])
        self.versions: dict[str, str] = dict(hello.get("versions", {}))
        self.process = process
        self._killed = False

    @classmethod
    def attach(cls, directory: Path, timeout_s: float) -> SocketRunner | None:
        """The runner already listening there, or None."""
        if not (directory / SOCKET).exists():
            return None
        try:
            hello = _exchange(directory / SOCKET, {"op": "hello"}, timeout_s)
        except (OSError, ValueError):
            return None
        return cls(directory, hello) if "pid" in hello else None

    @property
    def alive(self) -> bool:
        """Whether its process still runs."""
        if self.process is not None:
            return self.process.alive
        if self._killed:  # perhaps a zombie its starter has not reaped yet: gone all the same
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def call(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """One request and its answer.

        Raises:
            RunnerDied: it is gone, or ended without answering.
            GrammarTooComplex: no answer within ``timeout_s`` (it is stopped).
        """
        try:
            return _exchange(self.directory / SOCKET, message, timeout_s)
        except TimeoutError:
            self.kill()
            raise GrammarTooComplex(
                f"vLLM's tools builder did not answer within {timeout_s:g} s "
                "(MASKSCOPE_VLLM_TIMEOUT_S); its process was stopped"
            ) from None
        except (OSError, ValueError):
            raise self._died() from None

    def _died(self) -> RunnerDied:
        self.kill()
        log = self.directory / LOG
        tail = stderr_tail(log.open("rb")) if log.is_file() else "its process ended"
        return RunnerDied(tail or "its process ended", None)

    def stop(self) -> None:
        """Kill its process group (it leads a session of its own), from any thread."""
        self._killed = True
        if self.process is not None:
            self.process.stop()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def kill(self) -> None:
        """Kill it, and reap it when this process started it."""
        self.stop()
        if self.process is not None:
            self.process.kill()


def _exchange(path: Path, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout_s)
        client.connect(str(path))
        client.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            client.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = client.recv(1 << 16)
            if not chunk:
                raise ConnectionResetError("the runner closed the connection")
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer
