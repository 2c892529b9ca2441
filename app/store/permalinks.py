"""The embedded store: snapshots in one SQLite file (the default; needs nothing installed).

WAL mode with full sync: a snapshot acknowledged to the caller survives the process being
killed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from app.store.base import (
    ID_PATTERN,
    Added,
    SnapshotStore,
    StoredRow,
    canonical_id,
    canonical_json,
)
from app.store.migrations import VERSION_TABLE, pending

__all__ = ["ID_PATTERN", "PermalinkStore", "SqliteStore", "canonical_id", "canonical_json"]


class SqliteStore(SnapshotStore):
    """Snapshots by id in one SQLite file; the schema migrated on opening.

    Args:
        path: the database file (created with its directory when missing).
        max_bytes: the largest snapshot accepted.
    """

    def __init__(self, path: Path, *, max_bytes: int = 256 * 1024) -> None:
        super().__init__(max_bytes=max_bytes)
        self.path = path
        self.where = f"sqlite:///{path}"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._migrate()

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

    def _migrate(self) -> None:
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")  # the write lock: one process migrates at a time
            try:
                db.execute(
                    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
                    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
                applied = [r[0] for r in db.execute(f"SELECT version FROM {VERSION_TABLE}")]
                for migration in pending(applied, self.where):
                    for statement in migration.sqlite:
                        db.execute(statement)
                    db.execute(
                        f"INSERT INTO {VERSION_TABLE} (version, applied_at) VALUES (?, ?)",
                        (migration.version, time.time()),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Nothing to release: a connection is opened per operation."""

    def schema_version(self) -> int:
        """The newest migration applied to the file."""
        with self._connect() as db:
            row = db.execute(f"SELECT max(version) FROM {VERSION_TABLE}").fetchone()
        return int(row[0] or 0)

    def _insert(self, row: StoredRow) -> bool:
        with self._connect() as db:
            inserted: int = db.execute(
                "INSERT OR IGNORE INTO snapshots (id, content, created_at) VALUES (?, ?, ?)",
                (row.id, row.content, row.created_at),
            ).rowcount
        return inserted > 0

    def _select(self, snapshot_id: str) -> StoredRow | None:
        with self._connect() as db:
            found = db.execute(
                "SELECT id, content, created_at FROM snapshots WHERE id = ?", (snapshot_id,)
            ).fetchone()
        return None if found is None else StoredRow(found[0], found[1], float(found[2]))

    def _update_records(self, snapshot_id: str, text: str) -> bool:
        with self._connect() as db:
            updated: int = db.execute(
                "UPDATE snapshots SET records = ? WHERE id = ?", (text, snapshot_id)
            ).rowcount
        return updated > 0

    def _select_records(self, snapshot_id: str) -> str | None:
        with self._connect() as db:
            found = db.execute(
                "SELECT records FROM snapshots WHERE id = ?", (snapshot_id,)
            ).fetchone()
        return None if found is None else found[0]

    def _update_verdicts(self, snapshot_id: str, text: str) -> bool:
        with self._connect() as db:
            updated: int = db.execute(
                "UPDATE snapshots SET verdicts = ? WHERE id = ?", (text, snapshot_id)
            ).rowcount
        return updated > 0

    def _select_verdicts(self, snapshot_id: str) -> str | None:
        with self._connect() as db:
            found = db.execute(
                "SELECT verdicts FROM snapshots WHERE id = ?", (snapshot_id,)
            ).fetchone()
        return None if found is None else found[0]

    def _insert_suite(self, row: StoredRow) -> bool:
        with self._connect() as db:
            inserted: int = db.execute(
                "INSERT OR IGNORE INTO suites (id, content, created_at) VALUES (?, ?, ?)",
                (row.id, row.content, row.created_at),
            ).rowcount
        return inserted > 0

    def _select_suite(self, suite_id: str) -> StoredRow | None:
        with self._connect() as db:
            found = db.execute(
                "SELECT id, content, created_at FROM suites WHERE id = ?", (suite_id,)
            ).fetchone()
        return None if found is None else StoredRow(found[0], found[1], float(found[2]))

    def _page(self, after: tuple[float, str], batch: int) -> list[StoredRow]:
        with self._connect() as db:
            page = db.execute(
                "SELECT id, content, created_at, records FROM snapshots "
                "WHERE (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?",
                (after[0], after[1], batch),
            ).fetchall()
        return [StoredRow(i, content, float(at), records) for i, content, at, records in page]

    def add_rows(self, rows: Sequence[StoredRow]) -> list[Added]:
        """Add rows that keep their ids and times, in one transaction."""
        outcomes = []
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    cursor = db.execute(
                        "INSERT OR IGNORE INTO snapshots (id, content, created_at, records) "
                        "VALUES (?, ?, ?, ?)",
                        (row.id, row.content, row.created_at, row.records),
                    )
                    if cursor.rowcount:
                        outcomes.append(Added.NEW)
                        continue
                    there = db.execute(
                        "SELECT content FROM snapshots WHERE id = ?", (row.id,)
                    ).fetchone()
                    outcomes.append(Added.SAME if there[0] == row.content else Added.CONFLICT)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return outcomes


#: The name the SQLite store had when it was the only one.
PermalinkStore = SqliteStore
