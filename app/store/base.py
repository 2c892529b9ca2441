"""The one interface both permalink stores implement, and what they share.

A store keeps immutable snapshots named by a hash of their canonical content (see
:func:`canonical_id`): the same content always gets the same id, on either store, so a copy from
SQLite to PostgreSQL keeps every link. A write returns only once the database has made it
durable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from app.exceptions import SnapshotTooLarge

__all__ = [
    "ID_PATTERN",
    "VERDICTS_FACTOR",
    "Added",
    "SnapshotStore",
    "StoredRow",
    "canonical_id",
    "canonical_json",
]

ID_PATTERN = r"^[A-Za-z0-9_-]{12,16}$"

#: Verdicts may be this many times a snapshot's limit: a test's normalised text (the grammar's
#: indent) may be longer than the text the snapshot holds.
VERDICTS_FACTOR = 4


def canonical_json(content: dict[str, Any]) -> str:
    """One spelling of a snapshot: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_id(text: str, length: int = 12) -> str:
    """A short URL-safe id: the first ``length`` characters of the SHA-256, base64url."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:length]


@dataclass(frozen=True)
class StoredRow:
    """A snapshot as stored: its id, its canonical JSON text, its creation time (Unix s), and
    its recorded trace's JSON text (None when none was kept)."""

    id: str
    content: str
    created_at: float
    records: str | None = None


class Added(Enum):
    """What adding a stored row (a copy) did."""

    NEW = "new"
    SAME = "same"  # the id was there with the same content
    CONFLICT = "conflict"  # the id was there with other content: left as it was


class SnapshotStore(ABC):
    """Snapshots by id. Safe to call from any thread.

    Args:
        max_bytes: the largest snapshot :meth:`put` accepts.
    """

    #: Where the snapshots are, for messages (a password is never part of it).
    where: str

    def __init__(self, *, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    @abstractmethod
    def _insert(self, row: StoredRow) -> bool:
        """Insert ``row`` unless its id is taken, durably; whether it was inserted."""

    @abstractmethod
    def _select(self, snapshot_id: str) -> StoredRow | None:
        """The row with this id."""

    @abstractmethod
    def _update_records(self, snapshot_id: str, text: str) -> bool:
        """Set the recorded trace of the snapshot ``snapshot_id``, durably; whether it exists."""

    @abstractmethod
    def _select_records(self, snapshot_id: str) -> str | None:
        """The recorded trace's JSON text of a snapshot (None: none stored, or no snapshot)."""

    @abstractmethod
    def _update_verdicts(self, snapshot_id: str, text: str) -> bool:
        """Set the tests' verdicts of the snapshot ``snapshot_id``, durably; whether it exists."""

    @abstractmethod
    def _select_verdicts(self, snapshot_id: str) -> str | None:
        """The tests' verdicts' JSON text of a snapshot (None: none stored, or no snapshot)."""

    @abstractmethod
    def _insert_suite(self, row: StoredRow) -> bool:
        """Insert a suite's row unless its id is taken, durably; whether it was inserted."""

    @abstractmethod
    def _select_suite(self, suite_id: str) -> StoredRow | None:
        """The suite's row with this id."""

    @abstractmethod
    def _page(self, after: tuple[float, str], batch: int) -> list[StoredRow]:
        """Up to ``batch`` rows stored after ``after`` (created_at, id), in that order."""

    def rows(self, *, batch: int = 500) -> Iterator[StoredRow]:
        """Every stored row, oldest first, read ``batch`` at a time."""
        after: tuple[float, str] = (float("-inf"), "")
        while page := self._page(after, batch):
            yield from page
            after = (page[-1].created_at, page[-1].id)

    @abstractmethod
    def add_rows(self, rows: Sequence[StoredRow]) -> list[Added]:
        """Add rows that keep their ids and times (a copy), in one transaction."""

    @abstractmethod
    def schema_version(self) -> int:
        """The newest migration applied to the database."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's connections."""

    def put(self, content: dict[str, Any]) -> tuple[str, bool]:
        """Store a snapshot; returns its id and whether it was new.

        Raises:
            SnapshotTooLarge: the canonical snapshot is larger than ``max_bytes``.
            StoreUnavailable: the database cannot be reached.
        """
        text = canonical_json(content)
        size = len(text.encode("utf-8"))
        if size > self.max_bytes:
            raise SnapshotTooLarge(
                f"the snapshot is {size} bytes; a permalink may hold {self.max_bytes}"
            )
        now = time.time()
        for length in (12, 16):  # a longer id in the (astronomical) case of a collision
            snapshot_id = canonical_id(text, length)
            if self._insert(StoredRow(snapshot_id, text, now)):
                return snapshot_id, True
            found = self._select(snapshot_id)
            if found is not None and found.content == text:
                return snapshot_id, False
        raise RuntimeError("two snapshots share a 16-character id prefix")

    def put_records(self, snapshot_id: str, records: list[dict[str, Any]]) -> bool:
        """Keep a snapshot's recorded trace (what its chips show) beside it, outside the
        content its id hashes; a trace larger than ``max_bytes`` is not kept (the page then
        waits for the live session, as before).

        Returns:
            Whether it was kept.

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        text = json.dumps(records, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode("utf-8")) > self.max_bytes:
            return False
        return self._update_records(snapshot_id, text)

    def get_records(self, snapshot_id: str) -> list[dict[str, Any]] | None:
        """A snapshot's recorded trace, or None (an older permalink, or none kept).

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        text = self._select_records(snapshot_id)
        if text is None:
            return None
        records: list[dict[str, Any]] = json.loads(text)
        return records

    def put_verdicts(self, snapshot_id: str, verdicts: dict[str, Any]) -> bool:
        """Keep the verdicts a snapshot's tests were last judged with here, beside it and
        outside the content its id hashes (a GET reads them, never judges). Verdicts larger
        than ``VERDICTS_FACTOR * max_bytes`` are not kept.

        Returns:
            Whether they were kept.

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        text = json.dumps(verdicts, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode("utf-8")) > VERDICTS_FACTOR * self.max_bytes:
            return False
        return self._update_verdicts(snapshot_id, text)

    def get_verdicts(self, snapshot_id: str) -> dict[str, Any] | None:
        """The verdicts kept for a snapshot's tests, or None (none judged yet, or no snapshot).

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        text = self._select_verdicts(snapshot_id)
        if text is None:
            return None
        verdicts: dict[str, Any] = json.loads(text)
        return verdicts

    def put_suite(self, suite_id: str, content: dict[str, Any], *, max_bytes: int) -> bool:
        """Keep a checked suite (its sources and report) under ``suite_id``, the hash of what
        was checked (so not of this content, which holds timings); a second put of the same id
        keeps the first.

        Returns:
            Whether it was new.

        Raises:
            SnapshotTooLarge: the content is larger than ``max_bytes``.
            StoreUnavailable: the database cannot be reached.
        """
        text = canonical_json(content)
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise SnapshotTooLarge(
                f"the suite's report is {size} bytes; a suite may keep {max_bytes} "
                "(MASKSCOPE_SUITE_REPORT_MAX_BYTES)"
            )
        return self._insert_suite(StoredRow(suite_id, text, time.time()))

    def get_suite(self, suite_id: str) -> tuple[dict[str, Any], float] | None:
        """A kept suite and its creation time, or None.

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        row = self._select_suite(suite_id)
        if row is None:
            return None
        content: dict[str, Any] = json.loads(row.content)
        return content, row.created_at

    def get(self, snapshot_id: str) -> tuple[dict[str, Any], float] | None:
        """The snapshot and its creation time, or None.

        Raises:
            StoreUnavailable: the database cannot be reached.
        """
        row = self._select(snapshot_id)
        if row is None:
            return None
        content: dict[str, Any] = json.loads(row.content)
        return content, row.created_at
