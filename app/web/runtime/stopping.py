"""The server's stop on SIGTERM: refuse new work, end the streams, cancel what runs.

``python -m app serve`` calls :meth:`Shutdown.begin` as soon as the signal comes (uvicorn then
stops accepting connections and waits for the open ones), so that nothing the server is doing
outlives the grace period: the run streams see :attr:`Shutdown.started` after their step in
flight and end with a ``shutdown`` event, the pools refuse new jobs (503 ``shutting_down``) and
drop the waiting ones, and the worker processes are killed (the compile workers, by closing the
compiler; the sandbox children), which ends the compile, Doctor and sandbox calls waiting for
them at once.

Permalinks need nothing here: one is acknowledged only once its transaction has committed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["Shutdown", "kill_workers"]

log = logging.getLogger(__name__)

#: What a sandbox child runs (app/sandbox/process.py): found among this process's children.
_SANDBOX_MODULE = b"app.sandbox.runner"


def kill_workers() -> int:
    """Kill this process's Pydantic sandbox children, with their process groups (each runs
    in a session of its own: app/sandbox/process.py). Returns how many."""
    killed = 0
    for pid in _sandbox_children():
        try:
            os.killpg(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def _sandbox_children() -> list[int]:
    own = os.getpid()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            # The parent's pid is the second field after the command in parentheses.
            parent = int(stat.rpartition(")")[2].split()[1])
            if parent == own and _SANDBOX_MODULE in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or no /proc (not Linux)
    return found


class Shutdown:
    """Whether the server is stopping, and what to do when it starts to.

    Hooks run once, in the order added, on the thread that calls :meth:`begin`; one that fails
    is logged and the others still run. A component that owns cancellable work (the Doctor's
    examinations) adds its own with :meth:`add_hook`.
    """

    def __init__(self) -> None:
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._hooks: list[tuple[str, Callable[[], object]]] = []

    @property
    def started(self) -> bool:
        """Whether :meth:`begin` was called."""
        return self._started.is_set()

    def add_hook(self, name: str, hook: Callable[[], object]) -> None:
        """Run ``hook`` (named ``name`` in the log) when the stop begins."""
        with self._lock:
            self._hooks.append((name, hook))

    def begin(self) -> None:
        """Start the stop: mark it, then run every hook (a second call does nothing)."""
        with self._lock:
            if self._started.is_set():
                return
            self._started.set()
            hooks = list(self._hooks)
        log.info("shutting down: ending the streams and cancelling the work in flight")
        for name, hook in hooks:
            try:
                hook()
            except Exception:  # one hook's failure must not keep the others from running
                log.exception("the shutdown hook %r failed", name)
