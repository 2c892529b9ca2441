"""Live sessions by id: a cap, idle expiry, least-recently-used eviction of idle sessions only,
a memory budget, one run at a time."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from app.engine import Session, StopReason, Validation
from app.exceptions import CapacityExceeded, SessionGone, SessionNotFound

__all__ = ["SessionHandle", "SessionStore"]

_FORGET_AFTER = 4096  # how many ended ids are remembered, to answer 410 rather than 404


@dataclass
class SessionHandle:
    """A session with what the web layer needs around it.

    Attributes:
        id: the URL-safe id.
        session: the engine's session.
        request: the session request as received (for sharing and display).
        lock: serialises actions on the session; held until the action's thread is done.
        run: increments when a stream starts (or resumes) a run; an older loop sees it and stops.
        pause: set by ``/pause``; the run loop stops after the step in flight.
        streaming: whether a run loop is active.
        run_over: the last run ended (paused or done) and said so: a reconnect to it gets the
            rest of its events but never generates again.
        pydantic: the Pydantic source and root model, when the grammar came from one (the
            output is then validated with the model itself, in the sandbox).
        validated: the last validation, with the output (text and stop reason) it was for.
    """

    id: str
    session: Session
    request: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    run: int = 0
    pause: bool = False
    streaming: bool = False
    run_over: bool = False
    pydantic: tuple[str, str | None] | None = None
    validated: tuple[tuple[str, StopReason | None], Validation] | None = None
    last_used: float = field(default_factory=time.monotonic)

    @property
    def busy(self) -> bool:
        """Whether an action or a run is under way (or waiting its turn): never evicted then."""
        return self.streaming or self.lock.locked()

    @property
    def memory_bytes(self) -> int:
        """Memory the session holds: its KV cache and its step records."""
        return self.session.kv_bytes + self.session.records_bytes


class SessionStore:
    """The live sessions of one app.

    Args:
        max_sessions: the cap; when full, the least recently used session that is not busy is
            evicted (its page is told so), or the new one is refused (429).
        ttl_s: a session unused for this long expires (unless busy).
        max_memory_bytes: the KV caches and step records of all sessions together; above it,
            the least recently used sessions that are not busy are evicted.
    """

    def __init__(
        self, max_sessions: int, ttl_s: float, max_memory_bytes: int | None = None
    ) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.max_memory_bytes = max_memory_bytes
        self._live: OrderedDict[str, SessionHandle] = OrderedDict()
        self._ended: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def _end(self, session_id: str, why: str) -> None:
        self._live.pop(session_id, None)
        self._ended[session_id] = why
        while len(self._ended) > _FORGET_AFTER:
            self._ended.popitem(last=False)

    def expire(self, now: float | None = None) -> int:
        """End the sessions idle for longer than the time to live; returns how many ended."""
        now = time.monotonic() if now is None else now
        ended = 0
        for handle in list(self._live.values()):
            if not handle.busy and now - handle.last_used > self.ttl_s:
                self._end(handle.id, "expired after being idle")
                ended += 1
        return ended

    def add(
        self,
        session: Session,
        request: dict[str, Any],
        pydantic: tuple[str, str | None] | None = None,
    ) -> SessionHandle:
        """Register a new session, making room if needed.

        Raises:
            CapacityExceeded: every slot holds a busy session.
        """
        self.expire()
        while len(self._live) >= self.max_sessions:
            victim = next((h for h in self._live.values() if not h.busy), None)
            if victim is None:
                raise CapacityExceeded(
                    f"all {self.max_sessions} sessions are busy; try again in a moment"
                )
            self._end(victim.id, "was evicted to make room for a newer session")
        handle = SessionHandle(secrets.token_urlsafe(12), session, request, pydantic=pydantic)
        self._live[handle.id] = handle
        return handle

    def memory_bytes(self) -> int:
        """Memory held by all live sessions: KV caches and step records."""
        return sum(h.memory_bytes for h in self._live.values())

    def enforce_memory(self, keep: SessionHandle | None = None) -> None:
        """Evict least recently used sessions, busy ones spared, while memory exceeds the budget."""
        if self.max_memory_bytes is None:
            return
        total = self.memory_bytes()
        for handle in list(self._live.values()):
            if total <= self.max_memory_bytes:
                return
            if handle is keep or handle.busy:
                continue
            total -= handle.memory_bytes
            self._end(handle.id, "was evicted to free memory for other sessions")

    def get(self, session_id: str) -> SessionHandle:
        """The live session ``session_id``, marked as just used.

        Raises:
            SessionGone: it expired or was evicted.
            SessionNotFound: no session ever had this id (here).
        """
        self.expire()
        handle = self._live.get(session_id)
        if handle is None:
            why = self._ended.get(session_id)
            if why is not None:
                raise SessionGone(f"session {session_id} {why}; start a new one")
            raise SessionNotFound(f"no session {session_id!r}")
        handle.last_used = time.monotonic()
        self._live.move_to_end(session_id)
        return handle
