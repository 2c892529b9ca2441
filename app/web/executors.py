"""Threads of their own for each kind of blocking work, so that one kind never starves another.

asyncio's default executor has ``cpu_count + 4`` threads: a few compiles waiting for a worker
process, or a few sandbox runs, would fill it and leave a step waiting behind them. Here steps
(forward passes) have a pool sized for every live session; compiles, sandbox runs and replay
walks each have a pool sized for the processes or cores they use, and a bounded queue: past it,
the request is refused (429) rather than left waiting with the others.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import anyio

from app.doctor.doctor import RUNNING_AT_ONCE
from app.exceptions import CapacityExceeded
from app.settings import Settings

__all__ = ["Pools", "WorkPool"]

P = ParamSpec("P")
T = TypeVar("T")


class WorkPool:
    """A thread pool for one kind of blocking work, awaited from the event loop.

    Args:
        name: what the work is, for the 429 message ("compile", "sandbox run"...).
        threads: jobs running at once.
        queue: jobs that may wait for a thread; None for no bound (the caller bounds them).
    """

    def __init__(self, name: str, *, threads: int, queue: int | None = None) -> None:
        self.name = name
        self.threads = threads
        self.queue = queue
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"maskscope-{name}")
        self._pending = 0
        self._count_lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished (running or waiting)."""
        return self._pending

    def _admit(self) -> None:
        with self._count_lock:
            if self.queue is not None and self._pending >= self.threads + self.queue:
                raise CapacityExceeded(
                    f"too many {self.name}s at once ({self.threads} running, {self.queue} "
                    "waiting); try again in a moment"
                )
            self._pending += 1

    def _release(self, *_: object) -> None:
        with self._count_lock:
            self._pending -= 1

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on a thread of this pool and return its result.

        A thread cannot be stopped, so a caller cancelled meanwhile (its client left) waits for
        it before the cancellation goes on: a lock held around this call (a session's) is then
        released only once the work is really over.

        Raises:
            CapacityExceeded: every thread is busy and the queue is full.
        """
        self._admit()
        context = contextvars.copy_context()
        try:
            future = self._pool.submit(context.run, functools.partial(fn, *args, **kwargs))
        except RuntimeError:  # shut down
            self._release()
            raise
        future.add_done_callback(self._release)
        waiting = asyncio.wrap_future(future)
        # Starlette and sse-starlette cancel through anyio, which would cancel every await here
        # again and again: shield from it. A plain asyncio cancel still gets through: wait then.
        with anyio.CancelScope(shield=True):
            try:
                result = await asyncio.shield(waiting)
            except asyncio.CancelledError:
                await asyncio.wait([waiting])
                if not waiting.cancelled():
                    waiting.exception()  # retrieved: the caller is gone, nobody else will
                raise
        return result

    def shutdown(self) -> None:
        """Drop the jobs still waiting; running ones finish on their own."""
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class Pools:
    """The app's pools, one per kind of blocking work.

    Attributes:
        steps: forward passes and everything else that holds a session's lock (step, back,
            force, replaying a shared trace, validating the output). One thread per live
            session: a session runs one action at a time, so no step ever waits for another
            session's thread; the local model's forward passes take turns on its fair lock,
            while a remote engine's could run side by side.
        compiles: waiting for a compile worker process (cache hits never come here).
        sandbox: waiting for a Pydantic sandbox process.
        replays: walking a text through a grammar (CPU in this process).
        doctors: the Doctor's examinations (a few seconds each: compiles, the witness search,
            a sandbox batch).
    """

    steps: WorkPool
    compiles: WorkPool
    sandbox: WorkPool
    replays: WorkPool
    doctors: WorkPool

    @classmethod
    def create(cls, settings: Settings) -> Pools:
        """Pools sized by the settings."""
        queue = settings.queue_max
        return cls(
            steps=WorkPool("step", threads=settings.max_sessions),
            compiles=WorkPool("compile", threads=settings.compile_workers, queue=queue),
            sandbox=WorkPool("sandbox run", threads=settings.sandbox_workers, queue=queue),
            replays=WorkPool("replay", threads=settings.compile_workers, queue=queue),
            doctors=WorkPool("examination", threads=RUNNING_AT_ONCE, queue=queue),
        )

    def shutdown(self) -> None:
        """Shut every pool down."""
        for pool in (self.steps, self.compiles, self.sandbox, self.replays, self.doctors):
            pool.shutdown()
