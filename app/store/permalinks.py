"""Immutable snapshots in a SQLite file, named by a hash of their canonical content.

The same content always gets the same id, so sharing the same thing twice gives the same link,
and a link never changes what it shows. WAL mode with full sync: a snapshot acknowledged to the
caller survives the process being killed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.exceptions import SnapshotTooLarge

__all__ = ["ID_PATTERN", "PermalinkStore", "canonical_id", "canonical_json"]

ID_PATTERN = r"^[A-Za-z0-9_-]{12,16}$"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    created_at REAL NOT NULL
) WITHOUT ROWID
"""


def canonical_json(content: dict[str, Any]) -> str:
    """One spelling of a snapshot: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_id(text: str, length: int = 12) -> str:
    """A short URL-safe id: the first ``length`` characters of the SHA-256, base64url."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:length]


class PermalinkStore:
    """Snapshots by id in one SQLite file.

    Args:
        path: the database file (created with its directory when missing).
        max_bytes: the largest snapshot accepted.
    """

    def __init__(self, path: Path, *, max_bytes: int = 256 * 1024) -> None:
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # A connection per operation: safe from any thread and any number of processes.
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA busy_timeout=30000")
            yield db
        finally:
            db.close()

    def put(self, content: dict[str, Any]) -> tuple[str, bool]:
        """Store a snapshot; returns its id and whether it was new.

        Raises:
            SnapshotTooLarge: the canonical snapshot is larger than ``max_bytes``.
        """
        text = canonical_json(content)
        size = len(text.encode("utf-8"))
        if size > self.max_bytes:
            raise SnapshotTooLarge(
                f"the snapshot is {size} bytes; a permalink may hold {self.max_bytes}"
            )
        with self._connect() as db:
            for length in (12, 16):  # a longer id in the (astronomical) case of a collision
                snapshot_id = canonical_id(text, length)
                inserted = db.execute(
                    "INSERT OR IGNORE INTO snapshots (id, content, created_at) VALUES (?, ?, ?)",
                    (snapshot_id, text, time.time()),
                ).rowcount
                if inserted:
                    return snapshot_id, True
                row = db.execute(
                    "SELECT content FROM snapshots WHERE id = ?", (snapshot_id,)
                ).fetchone()
                if row and row[0] == text:
                    return snapshot_id, False
        raise RuntimeError("two snapshots share a 16-character id prefix")

    def get(self, snapshot_id: str) -> tuple[dict[str, Any], float] | None:
        """The snapshot and its creation time, or None."""
        with self._connect() as db:
            row = db.execute(
                "SELECT content, created_at FROM snapshots WHERE id = ?", (snapshot_id,)
            ).fetchone()
        if row is None:
            return None
        content: dict[str, Any] = json.loads(row[0])
        return content, float(row[1])
