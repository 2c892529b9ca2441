"""Threads of their own for each kind of blocking work, so that one kind never starves another.

asyncio's default executor has ``cpu_count + 4`` threads: a few compiles waiting for a worker
process, or a few sandbox runs, would fill it and leave a step waiting behind them. Here steps
(forward passes) have a pool sized for every live session; compiles, sandbox runs and replay
walks each have a pool sized for the processes or cores they use, and a bounded queue: past it,
the request is refused (429) rather than left waiting with the others. The queue is shared fairly
between clients: each may keep a few jobs waiting, and a freed thread serves the client with the
fewest jobs running, so one client's flood never stands in front of another's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar, cast

import anyio

from app.doctor.doctor import RUNNING_AT_ONCE
from app.doctor.worker import DoctorProcesses
from app.engine.budget import current_budget
from app.exceptions import CapacityExceeded, MaskscopeError, ShuttingDown
from app.settings import Settings
from app.web.middleware.clients import current_client

__all__ = ["Pools", "WorkPool"]

P = ParamSpec("P")
T = TypeVar("T")


class _Job:
    """One call waiting for (or running on) a thread, and the client it is for."""

    __slots__ = ("call", "client", "future")

    def __init__(self, client: str, call: Callable[[], object]) -> None:
        self.client = client
        self.call = call
        self.future: Future[object] = Future()


class WorkPool:
    """A thread pool for one kind of blocking work, awaited from the event loop, shared fairly
    between clients (:func:`~app.web.middleware.clients.current_client`).

    Waiting jobs are not served first come, first served: when a thread frees, it takes the
    oldest waiting job of the client with the fewest jobs running, ties going to the client
    served least recently. A second client's job therefore waits for at most the jobs already
    running, never for the first client's queue. Each client may also keep only
    ``queue_per_client`` jobs waiting, so one client cannot fill the queue for everyone.

    Args:
        name: what the work is, for the 429 message ("compile", "sandbox run"...).
        threads: jobs running at once.
        queue: jobs that may wait for a thread; None for no bound (the caller bounds them).
        queue_per_client: jobs one client may have waiting; None for no bound but ``queue``.
        label: the pool's name in the metrics (``name`` by default).
    """

    def __init__(
        self,
        name: str,
        *,
        threads: int,
        queue: int | None = None,
        queue_per_client: int | None = None,
        label: str | None = None,
    ) -> None:
        self.name = name
        self.label = label or name
        #: Told of every job: ``(seconds it ran, outcome)``, the outcome ``ok``, its error's
        #: code, or ``refused`` (never ran: seconds None). The app's metrics set it.
        self.observer: Callable[[float | None, str], None] | None = None
        self.threads = threads
        self.queue = queue
        self.queue_per_client = queue_per_client
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"maskscope-{name}")
        self._lock = threading.Lock()
        self._waiting: dict[str, deque[_Job]] = {}
        self._running: dict[str, int] = {}
        self._served: dict[str, int] = {}  # when each client with jobs last had one started
        self._serial = itertools.count()
        self._threads_busy = 0
        self._closed = False

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished (running or waiting)."""
        with self._lock:
            return sum(self._running.values()) + sum(map(len, self._waiting.values()))

    def _admit(self, job: _Job) -> None:
        with self._lock:
            if self._closed:
                raise ShuttingDown(f"the server is shutting down: it takes no new {self.name}")
            running = sum(self._running.values())
            waiting = sum(map(len, self._waiting.values()))
            if self.queue is not None and running + waiting >= self.threads + self.queue:
                raise CapacityExceeded(
                    f"too many {self.name}s at once ({self.threads} running, {self.queue} "
                    "waiting); try again in a moment"
                )
            if self._threads_busy < self.threads:
                # Submitted first, so a refusal counts nothing; its end waits for this lock.
                self._pool.submit(self._work, job)
                self._threads_busy += 1
                self._start(job)
                return
            mine = self._waiting.setdefault(job.client, deque())
            if self.queue_per_client is not None and len(mine) >= self.queue_per_client:
                if not mine:
                    del self._waiting[job.client]
                raise CapacityExceeded(
                    f"too many {self.name}s at once from {job.client}: {len(mine)} of yours "
                    f"wait already (at most {self.queue_per_client} per client); try again "
                    "when one is done"
                )
            mine.append(job)

    def _start(self, job: _Job) -> None:
        """Count ``job`` as running (under the lock)."""
        self._running[job.client] = self._running.get(job.client, 0) + 1
        self._served[job.client] = next(self._serial)

    def _next(self, done: _Job) -> _Job | None:
        """Count ``done`` as over and pick the job its thread runs next (None: the thread rests)."""
        with self._lock:
            client = done.client
            self._running[client] -= 1
            if not self._running[client]:
                del self._running[client]
                if client not in self._waiting:
                    del self._served[client]
            if not self._waiting:
                self._threads_busy -= 1
                return None
            turn = min(
                self._waiting,
                key=lambda c: (self._running.get(c, 0), self._served.get(c, -1)),
            )
            queued = self._waiting[turn]
            job = queued.popleft()
            if not queued:
                del self._waiting[turn]
            self._start(job)
            return job

    def _withdraw(self, job: _Job) -> bool:
        """Take ``job`` out of the queue if it is still waiting (True), so it never runs."""
        with self._lock:
            mine = self._waiting.get(job.client)
            if mine is None or job not in mine:
                return False
            mine.remove(job)
            if not mine:
                del self._waiting[job.client]
                if job.client not in self._running:
                    self._served.pop(job.client, None)
        job.future.cancel()
        return True

    def _work(self, first: _Job) -> None:
        job: _Job | None = first
        while job is not None:
            settle = self._execute(job)
            # Counted over before its caller hears of it: a job sent at once after this one's
            # answer never finds it still running (a 429 at the bound, a stale ``pending``).
            job = self._next(job)
            if settle is not None:
                settle()

    def _execute(self, job: _Job) -> Callable[[], None] | None:
        """Run ``job`` unless it was cancelled; what hands its outcome to the caller."""
        if not job.future.set_running_or_notify_cancel():
            return None
        started = time.perf_counter()
        try:
            result = job.call()
        except BaseException as error:  # handed to the caller, like an executor does
            outcome = error.code if isinstance(error, MaskscopeError) else "error"
            self._observe(time.perf_counter() - started, outcome)
            return functools.partial(job.future.set_exception, error)
        self._observe(time.perf_counter() - started, "ok")
        return functools.partial(job.future.set_result, result)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on a thread of this pool, in the caller's context, and return its result.

        A caller cancelled while its job waits for a thread (its client left) takes the job
        out of the queue: it never runs and no longer counts against the client's share. A
        thread cannot be stopped, so a caller cancelled once its job runs waits for it before
        the cancellation goes on (a walk under the caller's budget is cancelled: it stops at
        its next token): a lock held around this call (a session's) is then released
        only once the work is really over.

        Raises:
            CapacityExceeded: every thread is busy and the queue is full, or this client has
                its share of the queue waiting already.
        """
        context = contextvars.copy_context()
        job = _Job(current_client(), functools.partial(context.run, fn, *args, **kwargs))
        try:
            self._admit(job)
        except MaskscopeError:
            self._observe(None, "refused")
            raise
        waiting = asyncio.wrap_future(job.future)
        # Starlette and sse-starlette cancel through anyio, which would cancel every await here
        # again and again: shield from it. A plain asyncio cancel still gets through: wait then.
        with anyio.CancelScope(shield=True):
            try:
                result = await asyncio.shield(waiting)
            except asyncio.CancelledError:
                if self._withdraw(job):
                    raise
                walk = current_budget()  # a walk stops at its next token: the wait is short
                if walk is not None:
                    walk.cancel()
                while not waiting.done():  # cancelled again meanwhile: the thread still runs
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([waiting])
                if not waiting.cancelled():
                    waiting.exception()  # retrieved: the caller is gone, nobody else will
                raise
            except MaskscopeError as error:
                if self._closed and not isinstance(error, ShuttingDown):
                    # Its worker process was killed by the stop (a compile "too complex").
                    raise ShuttingDown(
                        f"the server is shutting down: this {self.name} was cancelled"
                    ) from error
                raise
        return cast(T, result)

    def _observe(self, seconds: float | None, outcome: str) -> None:
        observer = self.observer
        if observer is not None:
            observer(seconds, outcome)

    @property
    def waiting(self) -> int:
        """Jobs waiting for a thread (the queue's depth)."""
        with self._lock:
            return sum(map(len, self._waiting.values()))

    @property
    def running(self) -> int:
        """Jobs running on a thread."""
        with self._lock:
            return sum(self._running.values())

    def shutdown(self) -> None:
        """Refuse new jobs and fail the waiting ones (:class:`~app.exceptions.ShuttingDown`);
        running ones finish on their own (or fail, their worker process killed)."""
        with self._lock:
            self._closed = True
            dropped = [job for queued in self._waiting.values() for job in queued]
            self._waiting.clear()
        for job in dropped:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(
                    ShuttingDown(f"the server is shutting down: this {self.name} did not start")
                )
        self._pool.shutdown(wait=False)


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
        parses: parsing and checking a tools or structural-tag source (CPU in this process:
            a second for a large one), and writing its derived ``$model`` schemas in; one at a
            time.
        doctors: the Doctor's examinations (a few seconds each: compiles, the witness search,
            a sandbox batch); each thread waits for one of ``doctor_workers``.
        doctor_workers: the processes the Doctor examines in (killable, memory-capped);
            ``doctor_workers.close()`` kills them at once.
    """

    steps: WorkPool
    compiles: WorkPool
    sandbox: WorkPool
    replays: WorkPool
    parses: WorkPool
    doctors: WorkPool
    doctor_workers: DoctorProcesses

    @classmethod
    def create(cls, settings: Settings) -> Pools:
        """Pools sized by the settings."""
        bounded = functools.partial(
            WorkPool,
            queue=settings.queue_max,
            queue_per_client=min(settings.queue_max_per_client, settings.queue_max),
        )
        return cls(
            steps=WorkPool("step", threads=settings.max_sessions),
            compiles=bounded("compile", threads=settings.compile_workers),
            sandbox=bounded("sandbox run", threads=settings.sandbox_workers, label="sandbox"),
            replays=bounded("replay", threads=settings.compile_workers),
            # One thread: a second CPU-bound thread holding the GIL slowed every other answer
            # several times more (bench/flood.py), and a parse takes a second at most.
            parses=bounded("parse", threads=1),
            doctors=bounded("examination", threads=RUNNING_AT_ONCE, label="doctor"),
            doctor_workers=DoctorProcesses(settings),
        )

    def all(self) -> tuple[WorkPool, ...]:
        """Every pool."""
        return (self.steps, self.compiles, self.sandbox, self.replays, self.parses, self.doctors)

    def shutdown(self) -> None:
        """Shut every pool down; the Doctor's processes are killed at once."""
        self.doctor_workers.close()
        for pool in self.all():
            pool.shutdown()
