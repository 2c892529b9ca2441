"""Live sessions by id: a cap, a cap per client, idle expiry, eviction of idle sessions only (the
requester's own first, another client's only past its fair share), a memory budget, one run at a
time."""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from app.engine import Session, StopReason, Validation
from app.exceptions import CapacityExceeded, SessionGone, SessionNotFound, WrongReplica
from app.settings import REPLICA_ID_PATTERN
from app.web.middleware.clients import UNKNOWN
from app.web.runtime.runstate import RunState
from app.web.runtime.shadows import ShadowRunner

__all__ = ["SessionHandle", "SessionStore", "holder_of"]

_FORGET_AFTER = 4096  # how many ended ids are remembered, to answer 410 rather than 404
_REPLICA = re.compile(REPLICA_ID_PATTERN)


def holder_of(session_id: str) -> str | None:
    """The replica a session id names (``{replica_id}.{token}``), or None: a token alone (a
    server without a replica id) has no dot."""
    prefix, dot, _ = session_id.partition(".")
    return prefix if dot and _REPLICA.match(prefix) else None


@dataclass
class SessionHandle:
    """A session with what the web layer needs around it.

    Attributes:
        id: the URL-safe id.
        session: the engine's session.
        request: the session request as received (for sharing and display).
        lock: serialises actions on the session; held until the action's thread is done.
        runs: the run flags (which run is current, paused, streaming, over); only it writes them.
        pydantic: the Pydantic source and root model, when the grammar came from one (the
            output is then validated with the model itself, in the sandbox).
        validated: the last validation, with the output (text and stop reason) it was for.
        client: the address of the client that opened it (the key of the per-client caps).
    """

    id: str
    session: Session
    request: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    runs: RunState = field(default_factory=RunState)
    pydantic: tuple[str, str | None] | None = None
    validated: tuple[tuple[str, StopReason | None], Validation] | None = None
    last_used: float = field(default_factory=time.monotonic)
    client: str = UNKNOWN
    #: its shadow continuations (one at a time, on a thread of its own)
    shadows: ShadowRunner = field(default_factory=ShadowRunner)

    @property
    def busy(self) -> bool:
        """Whether an action or a run is under way (or waiting its turn): never evicted then."""
        return self.runs.streaming or self.lock.locked()

    @property
    def memory_bytes(self) -> int:
        """Memory the session holds: its KV cache and its step records."""
        return self.session.kv_bytes + self.session.records_bytes


class SessionStore:
    """The live sessions of one app, shared fairly between the clients that open them.

    Only idle sessions are ever evicted (a busy one is running an action or a stream), least
    recently used first, by these rules:

    - A client holding ``max_sessions_per_client`` sessions that opens another loses its own
      least recently used idle one (429 when all of its sessions are busy).
    - When the store is full, the requester's own idle sessions go first. Failing those, the
      victim is an idle session of a client holding more than its fair share,
      ``max_sessions // clients`` (the clients holding sessions, the requester included):
      the client holding the most sessions, its least recently used one. A client within its
      share never loses a session to another (429 then).
    - Above the memory budget, the client whose sessions hold the most memory loses its least
      recently used idle session first, and so on until the budget holds.

    Args:
        max_sessions: the cap on live sessions.
        ttl_s: a session unused for this long expires (unless busy).
        max_memory_bytes: the KV caches and step records of all sessions together.
        max_sessions_per_client: the cap on one client's live sessions; None (or
            ``max_sessions`` or more) for no cap but ``max_sessions``.
        replica_id: this replica's id, the prefix of its session ids (``{replica_id}.{token}``);
            None: ids are the token alone.
    """

    def __init__(
        self,
        max_sessions: int,
        ttl_s: float,
        max_memory_bytes: int | None = None,
        *,
        max_sessions_per_client: int | None = None,
        replica_id: str | None = None,
    ) -> None:
        self.replica_id = replica_id
        self.max_sessions = max_sessions
        self.max_sessions_per_client = min(max_sessions_per_client or max_sessions, max_sessions)
        self.ttl_s = ttl_s
        self.max_memory_bytes = max_memory_bytes
        self._live: OrderedDict[str, SessionHandle] = OrderedDict()
        self._ended: OrderedDict[str, str] = OrderedDict()
        #: Sessions ended so far, by cause (``expired``, ``evicted_client``, ``evicted_room``,
        #: ``evicted_memory``): the metrics' evictions.
        self.endings: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._live)

    def _end(self, session_id: str, why: str, cause: str) -> None:
        self.endings[cause] += 1
        handle = self._live.pop(session_id, None)
        if handle is not None:
            handle.shadows.close()
        self._ended[session_id] = why
        while len(self._ended) > _FORGET_AFTER:
            self._ended.popitem(last=False)

    def expire(self, now: float | None = None) -> int:
        """End the sessions idle for longer than the time to live; returns how many ended."""
        now = time.monotonic() if now is None else now
        ended = 0
        for handle in list(self._live.values()):
            if not handle.busy and now - handle.last_used > self.ttl_s:
                self._end(handle.id, "expired after being idle", "expired")
                ended += 1
        return ended

    def held_by(self, client: str) -> int:
        """How many live sessions ``client`` holds."""
        return sum(h.client == client for h in self._live.values())

    def _own_idle(self, client: str) -> SessionHandle | None:
        """``client``'s least recently used idle session."""
        return next((h for h in self._live.values() if h.client == client and not h.busy), None)

    def _share(self, client: str) -> int:
        """Each client's fair share of the sessions: the cap over the clients holding sessions,
        ``client`` included."""
        return self.max_sessions // len({h.client for h in self._live.values()} | {client})

    def _over_share(self, client: str) -> SessionHandle | None:
        """The least recently used idle session of the client holding the most sessions, among
        those holding more than their fair share."""
        held = Counter(h.client for h in self._live.values())
        share = self._share(client)
        idle = [h for h in self._live.values() if not h.busy and held[h.client] > share]
        # max() keeps the first of equals: the least recently used of the heaviest clients.
        return max(idle, key=lambda h: held[h.client], default=None)

    def add(
        self,
        session: Session,
        request: dict[str, Any],
        pydantic: tuple[str, str | None] | None = None,
        *,
        client: str = UNKNOWN,
    ) -> SessionHandle:
        """Register a new session for ``client``, making room if needed (see the class).

        Raises:
            CapacityExceeded: the client is at its cap with every session of its own busy, or
                every slot holds a busy session or one of a client within its fair share.
        """
        self.expire()
        cap = self.max_sessions_per_client
        if cap < self.max_sessions and self.held_by(client) >= cap:
            own = self._own_idle(client)
            if own is None:
                raise CapacityExceeded(
                    f"all {cap} sessions of {client} are busy (a client holds at most {cap}); "
                    "try again in a moment"
                )
            self._end(
                own.id,
                "was evicted to make room for a newer session of the same client",
                "evicted_client",
            )
        while len(self._live) >= self.max_sessions:
            victim = self._own_idle(client) or self._over_share(client)
            if victim is None:
                if all(h.busy for h in self._live.values()):
                    raise CapacityExceeded(
                        f"all {self.max_sessions} sessions are busy; try again in a moment"
                    )
                raise CapacityExceeded(
                    f"all {self.max_sessions} sessions are busy or held by clients within their "
                    f"fair share ({self._share(client)} each); try again later"
                )
            self._end(victim.id, "was evicted to make room for a newer session", "evicted_room")
        token = secrets.token_urlsafe(12)
        session_id = token if self.replica_id is None else f"{self.replica_id}.{token}"
        handle = SessionHandle(session_id, session, request, pydantic=pydantic, client=client)
        self._live[handle.id] = handle
        return handle

    def memory_bytes(self) -> int:
        """Memory held by all live sessions: KV caches and step records."""
        return sum(h.memory_bytes for h in self._live.values())

    def enforce_memory(self, keep: SessionHandle | None = None) -> None:
        """While memory exceeds the budget, evict the least recently used idle session (never
        ``keep``) of the client whose sessions hold the most memory."""
        if self.max_memory_bytes is None:
            return
        sizes = {h.id: h.memory_bytes for h in self._live.values()}
        held: Counter[str] = Counter()
        for handle in self._live.values():
            held[handle.client] += sizes[handle.id]
        total = sum(sizes.values())
        while total > self.max_memory_bytes:
            idle = [h for h in self._live.values() if h is not keep and not h.busy]
            if not idle:
                return
            # max() keeps the first of equals: the least recently used of the heaviest client.
            victim = max(idle, key=lambda h: held[h.client])
            total -= sizes[victim.id]
            held[victim.client] -= sizes[victim.id]
            self._end(victim.id, "was evicted to free memory for other sessions", "evicted_memory")

    def get(self, session_id: str) -> SessionHandle:
        """The live session ``session_id``, marked as just used.

        Raises:
            WrongReplica: the id names another replica (whatever else it holds: that replica
                answers for it).
            SessionGone: it expired or was evicted.
            SessionNotFound: no session ever had this id (here).
        """
        holder = holder_of(session_id)
        if holder is not None and holder != self.replica_id:
            here = f"replica {self.replica_id!r}" if self.replica_id else "a server alone"
            raise WrongReplica(
                f"session {session_id!r} is held by replica {holder!r}, and this is {here}: "
                f"route requests for sessions starting with {holder + '.'!r} to replica {holder!r}",
                holder=holder,
            )
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
