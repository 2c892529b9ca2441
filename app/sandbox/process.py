"""Start the sandbox process with its limits, an empty environment and a temporary directory, and
read back its answer as the untrusted data it is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.exceptions import PydanticFailed, RequestEnded, SandboxUnconfined
from app.sandbox.contain import Level

__all__ = ["MAX_ANSWER_DEPTH", "Cancel", "Layers", "Limits", "malformed", "probe", "run_child"]

#: Nesting allowed in an answer: far more than any schema needs, far less than a recursion limit.
MAX_ANSWER_DEPTH = 200


@dataclass(frozen=True)
class Limits:
    """What one sandbox run may use."""

    cpu_s: int = 5
    memory_bytes: int = 1024 * 1024 * 1024
    output_bytes: int = 4 * 1024 * 1024
    wall_s: float = 15.0


@dataclass(frozen=True)
class Layers:
    """The layers the sandbox process applies: all of them.

    Only the containment tests lower them, to prove that each layer does its own work (a source
    that escaped the static check and the audit hook meets the kernel alone). The server never
    builds anything but the default, and nothing in a request reaches this object.
    """

    nproc: bool = True
    uid: bool = True
    landlock: bool = True
    seccomp: bool = True
    audit_hook: bool = True
    preload: tuple[str, ...] = ()


class Cancel:
    """Stops one sandbox run from any thread: :meth:`set` kills its process group at once (or
    keeps it from starting), and the run then raises :class:`~app.exceptions.RequestEnded`.

    The web layer sets it when the client leaves; the run's thread, blocked on the process,
    wakes as soon as the process is gone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._process: subprocess.Popen[bytes] | None = None
        #: Whether the run's process was started.
        self.started = False

    def set(self) -> None:
        """Stop the run: kill its process now, or refuse to start it."""
        with self._lock:
            self._set = True
            if self._process is not None and self._process.returncode is None:
                _kill(self._process)

    def is_set(self) -> bool:
        """Whether the run was told to stop."""
        return self._set

    @property
    def pid(self) -> int | None:
        """The pid of the run's process while it runs (None before and after)."""
        with self._lock:
            process = self._process
        return process.pid if process is not None and process.returncode is None else None

    def _attach(self, process: subprocess.Popen[bytes] | None) -> None:
        """Watch ``process`` (None: the run is over); killed at once if already set."""
        with self._lock:
            self._process = process
            if process is not None:
                self.started = True
                if self._set:
                    _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` with its process group (it leads a session of its own)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # gone already


def _failure(returncode: int, stderr: str, limits: Limits) -> PydanticFailed:
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) or "File too large" in stderr:
        return PydanticFailed(f"the schema is larger than the {limits.output_bytes} bytes allowed")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU):
        return PydanticFailed(f"the source used more than {limits.cpu_s} s of CPU time")
    if returncode == -signal.SIGSYS:
        return PydanticFailed("the sandbox process made a system call of another architecture")
    if "MemoryError" in stderr:
        return PydanticFailed(f"the source needed more than {limits.memory_bytes} bytes of memory")
    last = stderr.strip().splitlines()[-1:] or [f"exit status {returncode}"]
    return PydanticFailed(f"the sandbox process failed: {last[0]}")


def malformed() -> PydanticFailed:
    """The error for an answer that is not one (a process that ran hostile code may forge it)."""
    return PydanticFailed("the sandbox process gave a malformed answer")


def _depth(value: Any) -> int:
    """The nesting of a JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _parse(raw: bytes) -> dict[str, Any]:
    """The child's answer; a process that ran hostile code may have written anything."""
    try:
        answer = json.loads(raw)
    except RecursionError:
        answer = None
        depth = MAX_ANSWER_DEPTH + 1
    except ValueError:
        raise PydanticFailed("the sandbox process gave no answer") from None
    else:
        depth = _depth(answer)
    if depth > MAX_ANSWER_DEPTH:
        raise PydanticFailed(f"the sandbox's answer nests deeper than {MAX_ANSWER_DEPTH} levels")
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise malformed()
    return answer


def _command(config: dict[str, Any]) -> list[str]:
    return [sys.executable, "-I", "-B", "-m", "app.sandbox.runner", json.dumps(config)]


def _spawn(
    config: dict[str, Any], stdin: bytes, limits: Limits, cancel: Cancel | None = None
) -> dict[str, Any]:
    cancel = cancel or Cancel()
    if cancel.is_set():
        raise _ended()
    with tempfile.TemporaryDirectory(prefix="maskscope-sandbox-") as tmp:
        out_path, err_path = Path(tmp) / "answer.json", Path(tmp) / "stderr.txt"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                _command(config), stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=tmp, env={},
                close_fds=True, start_new_session=True,
            )  # fmt: skip
            cancel._attach(process)
            try:
                process.communicate(stdin, timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                _kill(process)
                process.wait()
                raise PydanticFailed(
                    f"the source ran longer than the {limits.wall_s:g} s allowed"
                ) from None
            finally:
                cancel._attach(None)
        if cancel.is_set():
            raise _ended()
        stderr = err_path.read_text(errors="replace")[-4000:]
        if process.returncode != 0:
            raise _failure(process.returncode, stderr, limits)
        return _parse(out_path.read_bytes())


def _ended() -> RequestEnded:
    return RequestEnded("the client left: its Pydantic sandbox run was stopped")


def run_child(
    request: dict[str, Any],
    limits: Limits,
    *,
    require: Level = Level.FULL,
    layers: Layers = Layers(),
    cancel: Cancel | None = None,
) -> dict[str, Any]:
    """Run one request in a fresh ``python -I -B`` process and return its JSON answer.

    The process gets an empty environment, no inherited file descriptors but its stdin and two
    files in a temporary directory (its working directory, removed afterwards), contains itself
    (``contain.py``) before it reads the request, and is killed with its whole process group when
    it runs past the wall-clock limit.

    Args:
        request: what to do (``action``, ``source``...), sent on stdin after containment.
        limits: CPU, memory, output size and wall-clock limits.
        require: the containment level below which the process refuses to run the source.
        layers: the layers applied (all; the containment tests lower them).
        cancel: stops the run from another thread (its process killed).

    Raises:
        SandboxUnconfined: the process could not reach ``require``.
        RequestEnded: ``cancel`` was set before the process answered.
        PydanticFailed: the process ran out of time, memory or output size, crashed, or answered
            something that is not an answer.
    """
    config = {
        "limits": asdict(limits),
        "require": require.value,
        "layers": asdict(layers),
        "probe": False,
    }
    answer = _spawn(config, json.dumps(request).encode(), limits, cancel)
    error = answer.get("error")
    if isinstance(error, dict) and error.get("code") == SandboxUnconfined.code:
        raise SandboxUnconfined(str(error.get("message")))
    return answer


def probe(limits: Limits) -> tuple[Level, str]:
    """The containment level a sandbox process reaches on this machine, and what it applied.

    Runs the process once, containing itself exactly as for a request, with nothing to run.
    """
    config = {
        "limits": asdict(limits),
        "require": Level.NONE.value,
        "layers": asdict(Layers()),
        "probe": True,
    }
    answer = _spawn(config, b"", limits)
    containment = answer.get("containment")
    if not isinstance(containment, dict):
        raise malformed()
    return Level(containment["level"]), str(containment["detail"])
