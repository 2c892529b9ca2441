"""The permalink quota: how many permalinks one client may create a minute, and how many bytes of
new snapshots it may store an hour (429 ``rate_limited`` with ``Retry-After`` past either).

A client is :func:`~app.web.middleware.clients.current_client`'s key (its /64, its address...). The
counts
are kept in this process's memory, not in the store: the store holds no client (a permalink's
row names nobody, and should not start keeping addresses), and counting a shared PostgreSQL
per request would put a query and a lock on every share. So each replica keeps its own window,
and a restart forgets it: behind N replicas a client may create up to N times the quota.

Both windows slide: a request is refused while the client's last ``per_minute`` creations fall
within the past minute, or while its bytes of the past hour reach ``bytes_per_hour``; the
``Retry-After`` is when the oldest of them leaves the window. Bytes are charged once a snapshot is
stored (the ones it really holds, its recorded trace included), so the last snapshot admitted may
take a client past the bytes quota by up to one snapshot. At most :data:`MAX_CLIENTS` clients are
followed; past it the one idle longest is forgotten.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from app.exceptions import RateLimited
from app.store.base import SnapshotStore, canonical_json
from app.web.middleware.clients import current_client

__all__ = ["MAX_CLIENTS", "PermalinkQuota", "admit_permalink", "charge_permalink"]

#: The most clients followed at once (each holds at most ``per_minute`` times plus an hour of
#: stored snapshots).
MAX_CLIENTS = 10_000

_MINUTE = 60.0
_HOUR = 3600.0


@dataclass
class _Usage:
    """One client's creations of the past minute, and its stored snapshots of the past hour."""

    created: deque[float] = field(default_factory=deque)
    stored: OrderedDict[str, tuple[float, int]] = field(default_factory=OrderedDict)
    stored_bytes: int = 0

    def expire(self, now: float) -> None:
        while self.created and self.created[0] <= now - _MINUTE:
            self.created.popleft()
        while self.stored:
            snapshot_id, (when, size) = next(iter(self.stored.items()))
            if when > now - _HOUR:
                break
            del self.stored[snapshot_id]
            self.stored_bytes -= size

    def bytes_free_at(self, limit: int) -> float:
        """When enough of the stored bytes have left the hour for the client to be under
        ``limit``."""
        left = self.stored_bytes
        for when, size in self.stored.values():
            left -= size
            if left < limit:
                return when + _HOUR
        return 0.0


class PermalinkQuota:
    """Per-client counts of permalinks created and bytes stored, in sliding windows.

    Args:
        per_minute: permalinks one client may create a minute.
        bytes_per_hour: bytes of new snapshots one client may store an hour.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        per_minute: int,
        bytes_per_hour: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.bytes_per_hour = bytes_per_hour
        self.clock = clock
        self._usage: OrderedDict[str, _Usage] = OrderedDict()
        self._lock = threading.Lock()

    def _of(self, client: str, now: float) -> _Usage:
        usage = self._usage.get(client)
        if usage is None:
            if len(self._usage) >= MAX_CLIENTS:
                self._usage.popitem(last=False)
            usage = self._usage[client] = _Usage()
        self._usage.move_to_end(client)
        usage.expire(now)
        return usage

    def admit(self, client: str) -> None:
        """Count a permalink ``client`` asks to create, or refuse it.

        Raises:
            RateLimited: the client created ``per_minute`` permalinks in the past minute, or
                stored ``bytes_per_hour`` bytes in the past hour.
        """
        with self._lock:
            now = self.clock()
            usage = self._of(client, now)
            if len(usage.created) >= self.per_minute:
                wait = usage.created[0] + _MINUTE - now
                raise RateLimited(
                    f"{client} created {len(usage.created)} permalinks in the past minute (at "
                    f"most {self.per_minute}); try again in {_seconds(wait)} s",
                    retry_after_s=_seconds(wait),
                )
            if usage.stored_bytes >= self.bytes_per_hour:
                wait = usage.bytes_free_at(self.bytes_per_hour) - now
                raise RateLimited(
                    f"{client} stored {usage.stored_bytes:,} bytes of permalinks in the past "
                    f"hour (at most {self.bytes_per_hour:,}); try again in {_seconds(wait)} s",
                    retry_after_s=_seconds(wait),
                )
            usage.created.append(now)

    def charge(self, client: str, snapshot_id: str, size: int) -> None:
        """Count ``size`` bytes stored for ``client`` by the snapshot ``snapshot_id`` (once
        within the hour, however often the client shares it)."""
        with self._lock:
            now = self.clock()
            usage = self._of(client, now)
            if snapshot_id not in usage.stored:
                usage.stored[snapshot_id] = (now, size)
                usage.stored_bytes += size

    def used(self, client: str) -> tuple[int, int]:
        """The permalinks ``client`` created in the past minute and its bytes of the past hour."""
        with self._lock:
            usage = self._usage.get(client)
            if usage is None:
                return 0, 0
            usage.expire(self.clock())
            return len(usage.created), usage.stored_bytes


def _seconds(wait: float) -> int:
    """``Retry-After``: whole seconds, at least 1."""
    return max(1, math.ceil(wait))


def admit_permalink(quota: PermalinkQuota) -> str:
    """Count a permalink the current client asks for (before any work is done for it).

    Returns:
        The client, to charge what is stored with :func:`charge_permalink`.

    Raises:
        RateLimited: the client's quota is used up.
    """
    client = current_client()
    quota.admit(client)
    return client


def stored_size(store: SnapshotStore, snapshot_id: str) -> int:
    """The bytes a stored snapshot holds: its canonical content and its recorded trace."""
    found = store.get(snapshot_id)
    if found is None:
        return 0
    records = store.get_records(snapshot_id)
    size = len(canonical_json(found[0]).encode("utf-8"))
    if records is not None:
        text = json.dumps(records, separators=(",", ":"), ensure_ascii=False)
        size += len(text.encode("utf-8"))
    return size


async def charge_permalink(
    quota: PermalinkQuota, store: SnapshotStore, client: str, snapshot_id: str
) -> None:
    """Charge ``client`` with the bytes the snapshot ``snapshot_id`` holds (read off the event
    loop), once per client and snapshot within the hour. The API charges only a snapshot its
    request stored (201); the page's Share cannot tell, and charges the one it links to."""
    size = await asyncio.to_thread(stored_size, store, snapshot_id)
    quota.charge(client, snapshot_id, size)
