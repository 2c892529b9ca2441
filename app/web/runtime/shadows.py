"""A session's shadow continuations: one at a time, on a thread of the session's own, each
cancellable (a newer one cancels the one before)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["ShadowRunner"]

T = TypeVar("T")


class ShadowRunner:
    """Runs one session's shadow continuations off the event loop and off the step pool, so a
    shadow never waits behind a run's steps (nor holds one up but for its forward passes)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._cancel: threading.Event | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether a shadow is under way (and not cancelled)."""
        cancel = self._cancel
        return cancel is not None and not cancel.is_set()

    async def run(self, work: Callable[[threading.Event], T]) -> T:
        """Run ``work(cancel)`` on the session's shadow thread, cancelling the shadow before it.

        ``cancel`` is set when :meth:`cancel` is called, a newer shadow starts, the session
        ends, or the request waiting for it goes away.
        """
        cancel = threading.Event()
        with self._lock:
            if self._cancel is not None:
                self._cancel.set()
            self._cancel = cancel
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="shadow")
            executor = self._executor
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, work, cancel)
        finally:
            cancel.set()
            with self._lock:
                if self._cancel is cancel:
                    self._cancel = None

    def cancel(self) -> bool:
        """Cancel the shadow under way; whether there was one."""
        with self._lock:
            cancel, self._cancel = self._cancel, None
        if cancel is None or cancel.is_set():
            return False
        cancel.set()
        return True

    def close(self) -> None:
        """The session ended: cancel its shadow and let its thread go."""
        self.cancel()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
