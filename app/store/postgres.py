"""The team store: snapshots in PostgreSQL, shared by every replica (psycopg 3 and its pool).

Every write commits before it returns, with ``synchronous_commit`` at least ``on`` for our
connections: an acknowledged snapshot is in the server's flushed WAL. psycopg is imported only
here, and this module only when a ``postgresql://`` URL is configured, so the SQLite default
needs nothing of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from app.exceptions import StoreUnavailable
from app.store.base import Added, SnapshotStore, StoredRow
from app.store.migrations import VERSION_TABLE, pending

__all__ = ["PostgresStore", "redacted"]

log = logging.getLogger(__name__)

# pg_advisory_xact_lock's key: replicas starting at once migrate one after the other.
_MIGRATION_LOCK = 0x6D61736B73636F70  # "maskscop"
_TIMEOUT_S = 10.0


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _configure(conn: psycopg.Connection[Any]) -> None:
    # A server set to synchronous_commit=off (or local) would acknowledge a commit before its
    # WAL is flushed; ours are made durable whatever the server's default.
    setting = conn.execute("SHOW synchronous_commit").fetchone()
    if setting is not None and setting[0] in ("off", "local"):
        conn.execute("SET synchronous_commit = on")


class PostgresStore(SnapshotStore):
    """Snapshots by id in a PostgreSQL database; the schema migrated on opening.

    Args:
        url: a ``postgresql://`` connection URL (libpq's).
        max_bytes: the largest snapshot accepted.
        pool_size: connections kept open at most.
        timeout_s: how long connecting, or waiting for a free connection, may take before
            the operation fails with :class:`StoreUnavailable` (a request answers 503 then).

    Raises:
        StoreUnavailable: the server cannot be reached, or refuses the connection.
    """

    def __init__(
        self,
        url: str,
        *,
        max_bytes: int = 256 * 1024,
        pool_size: int = 8,
        timeout_s: float = _TIMEOUT_S,
    ) -> None:
        super().__init__(max_bytes=max_bytes)
        self.where = redacted(url)
        self._timeout_s = timeout_s
        self._migrate(url)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(timeout_s))},
            configure=_configure,
            check=ConnectionPool.check_connection,  # a server restart leaves dead connections
            timeout=timeout_s,
            open=False,
            name="maskscope-permalinks",
        )
        self._pool.open()

    def _unavailable(self, error: Exception) -> StoreUnavailable:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return StoreUnavailable(f"the permalink database {self.where} is unavailable: {reason}")

    def _migrate(self, url: str) -> None:
        try:
            timeout = max(1, round(self._timeout_s))
            with psycopg.connect(url, connect_timeout=timeout) as conn:
                # One transaction: the lock, the version table, every pending migration.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
                    "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
                )
                applied = [r[0] for r in conn.execute(f"SELECT version FROM {VERSION_TABLE}")]
                for migration in pending(applied, self.where):
                    log.info("permalink schema: applying %d, %s", migration.version, migration.what)
                    for statement in migration.postgres:
                        conn.execute(statement)
                    conn.execute(
                        f"INSERT INTO {VERSION_TABLE} (version, applied_at) VALUES (%s, %s)",
                        (migration.version, time.time()),
                    )
        except psycopg.OperationalError as error:
            raise self._unavailable(error) from None

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise self._unavailable(error) from None

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()

    def schema_version(self) -> int:
        """The newest migration applied to the database."""
        with self._connection() as conn:
            row = conn.execute(f"SELECT max(version) FROM {VERSION_TABLE}").fetchone()
        return int(row[0] or 0) if row else 0

    def _insert(self, row: StoredRow) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "INSERT INTO snapshots (id, content, created_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (row.id, row.content, row.created_at),
            )
            return cursor.rowcount > 0

    def _select(self, snapshot_id: str) -> StoredRow | None:
        with self._connection() as conn:
            found = conn.execute(
                "SELECT id, content, created_at FROM snapshots WHERE id = %s", (snapshot_id,)
            ).fetchone()
        return None if found is None else StoredRow(found[0], found[1], float(found[2]))

    def _update_records(self, snapshot_id: str, text: str) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "UPDATE snapshots SET records = %s WHERE id = %s", (text, snapshot_id)
            )
            return cursor.rowcount > 0

    def _select_records(self, snapshot_id: str) -> str | None:
        with self._connection() as conn:
            found = conn.execute(
                "SELECT records FROM snapshots WHERE id = %s", (snapshot_id,)
            ).fetchone()
        return None if found is None else found[0]

    def _update_verdicts(self, snapshot_id: str, text: str) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "UPDATE snapshots SET verdicts = %s WHERE id = %s", (text, snapshot_id)
            )
            return cursor.rowcount > 0

    def _select_verdicts(self, snapshot_id: str) -> str | None:
        with self._connection() as conn:
            found = conn.execute(
                "SELECT verdicts FROM snapshots WHERE id = %s", (snapshot_id,)
            ).fetchone()
        return None if found is None else found[0]

    def _insert_suite(self, row: StoredRow) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "INSERT INTO suites (id, content, created_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (row.id, row.content, row.created_at),
            )
            return cursor.rowcount > 0

    def _select_suite(self, suite_id: str) -> StoredRow | None:
        with self._connection() as conn:
            found = conn.execute(
                "SELECT id, content, created_at FROM suites WHERE id = %s", (suite_id,)
            ).fetchone()
        return None if found is None else StoredRow(found[0], found[1], float(found[2]))

    def _page(self, after: tuple[float, str], batch: int) -> list[StoredRow]:
        with self._connection() as conn:
            page = conn.execute(
                "SELECT id, content, created_at, records FROM snapshots "
                "WHERE (created_at, id) > (%s, %s) ORDER BY created_at, id LIMIT %s",
                (after[0], after[1], batch),
            ).fetchall()
        return [StoredRow(i, content, float(at), records) for i, content, at, records in page]

    def add_rows(self, rows: Sequence[StoredRow]) -> list[Added]:
        """Add rows that keep their ids and times, in one transaction."""
        outcomes = []
        with self._connection() as conn, conn.transaction():
            for row in rows:
                cursor = conn.execute(
                    "INSERT INTO snapshots (id, content, created_at, records) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                    (row.id, row.content, row.created_at, row.records),
                )
                if cursor.rowcount:
                    outcomes.append(Added.NEW)
                    continue
                there = conn.execute(
                    "SELECT content FROM snapshots WHERE id = %s", (row.id,)
                ).fetchone()
                same = there is not None and there[0] == row.content
                outcomes.append(Added.SAME if same else Added.CONFLICT)
        return outcomes
