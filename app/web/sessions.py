"""Live sessions by id: a cap, idle expiry, least-recently-used eviction, one run at a time."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from app.engine import Session, Validation
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
        lock: serialises actions on the session.
        run: increments when a stream starts a run; an older run loop sees it and stops.
        pause: set by ``/pause``; the run loop stops after the step in flight.
        streaming: whether a run loop is active.
        pydantic: the Pydantic source and root model, when the grammar came from one (the
            output is then validated with the model itself, in the sandbox).
        validated: the last validation, with the text it was for.
    """

    id: str
    session: Session
    request: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    run: int = 0
    pause: bool = False
    streaming: bool = False
    pydantic: tuple[str, str | None] | None = None
    validated: tuple[str, Validation] | None = None
    last_used: float = field(default_factory=time.monotonic)


class SessionStore:
    """The live sessions of one app.

    Args:
        max_sessions: the cap; when full, the least recently used session that is not streaming
            is evicted (its page is told so), or the new one is refused (429).
        ttl_s: a session unused for this long expires.
        max_kv_bytes: the KV caches of all sessions together; above it, the least recently used
            idle sessions are evicted.
    """

    def __init__(self, max_sessions: int, ttl_s: float, max_kv_bytes: int | None = None) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.max_kv_bytes = max_kv_bytes
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
            if not handle.streaming and now - handle.last_used > self.ttl_s:
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
            CapacityExceeded: every slot holds a session that is streaming.
        """
        self.expire()
        while len(self._live) >= self.max_sessions:
            victim = next((h for h in self._live.values() if not h.streaming), None)
            if victim is None:
                raise CapacityExceeded(
                    f"all {self.max_sessions} sessions are running; try again in a moment"
                )
            self._end(victim.id, "was evicted to make room for a newer session")
        handle = SessionHandle(secrets.token_urlsafe(12), session, request, pydantic=pydantic)
        self._live[handle.id] = handle
        return handle

    def kv_bytes(self) -> int:
        """Memory held by the KV caches of all live sessions."""
        return sum(h.session.kv_bytes for h in self._live.values())

    def enforce_memory(self, keep: SessionHandle | None = None) -> None:
        """Evict least recently used idle sessions while the KV caches exceed their budget."""
        if self.max_kv_bytes is None:
            return
        total = self.kv_bytes()
        for handle in list(self._live.values()):
            if total <= self.max_kv_bytes:
                return
            if handle is keep or handle.streaming:
                continue
            total -= handle.session.kv_bytes
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
