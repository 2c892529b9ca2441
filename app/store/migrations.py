"""The permalink schema's versions: each migration once, in order, on both stores.

A migration is applied with the version row that records it, in one transaction, under a lock
(SQLite's write lock, a PostgreSQL advisory lock), so replicas starting at once apply it once.
A migration never changes once released: a change to the schema is a new version.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.exceptions import StoreUnavailable

__all__ = ["LATEST", "MIGRATIONS", "VERSION_TABLE", "Migration", "pending"]

#: The table that records which versions are applied (one row each).
VERSION_TABLE = "maskscope_schema"


@dataclass(frozen=True)
class Migration:
    """One version of the schema.

    Attributes:
        version: its number, from 1, without gaps.
        what: what it changes, for the log.
        sqlite: its statements for SQLite.
        postgres: its statements for PostgreSQL.
    """

    version: int
    what: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the snapshots table",
        # IF NOT EXISTS: files made before versioning already hold this table.
        sqlite=(
            "CREATE TABLE IF NOT EXISTS snapshots (id TEXT PRIMARY KEY, content TEXT NOT NULL, "
            "created_at REAL NOT NULL) WITHOUT ROWID",
        ),
        # TEXT, not JSONB: the canonical spelling the id hashes is kept byte for byte.
        postgres=(
            "CREATE TABLE IF NOT EXISTS snapshots (id TEXT PRIMARY KEY, content TEXT NOT NULL, "
            "created_at DOUBLE PRECISION NOT NULL)",
        ),
    ),
    Migration(
        2,
        "the recorded trace beside each snapshot",
        # Beside the content, never in it: the id hashes the content only, so old ids stay.
        sqlite=("ALTER TABLE snapshots ADD COLUMN records TEXT",),
        postgres=("ALTER TABLE snapshots ADD COLUMN IF NOT EXISTS records TEXT",),
    ),
    Migration(
        3,
        "the tests' verdicts judged here, beside each snapshot",
        # Beside the content, like the records: judged again in the background, read by a GET.
        sqlite=("ALTER TABLE snapshots ADD COLUMN verdicts TEXT",),
        postgres=("ALTER TABLE snapshots ADD COLUMN IF NOT EXISTS verdicts TEXT",),
    ),
    Migration(
        4,
        "the suite reports (the Suite view's permalinks)",
        # A table of their own: a suite's id hashes what was checked (its sources, stacks,
        # engines, options, model), never the report, which holds timings.
        sqlite=(
            "CREATE TABLE IF NOT EXISTS suites (id TEXT PRIMARY KEY, content TEXT NOT NULL, "
            "created_at REAL NOT NULL) WITHOUT ROWID",
        ),
        postgres=(
            "CREATE TABLE IF NOT EXISTS suites (id TEXT PRIMARY KEY, content TEXT NOT NULL, "
            "created_at DOUBLE PRECISION NOT NULL)",
        ),
    ),
)

#: The newest version this code knows.
LATEST = MIGRATIONS[-1].version


def pending(applied: Iterable[int], where: str) -> list[Migration]:
    """The migrations not yet applied, in order.

    Raises:
        StoreUnavailable: the database has a version newer than this code knows (a newer
            Maskscope migrated it).
    """
    done = set(applied)
    newest = max(done, default=0)
    if newest > LATEST:
        raise StoreUnavailable(
            f"the permalink database {where} is at schema version {newest}, newer than this "
            f"Maskscope knows ({LATEST}): run the newer Maskscope, or upgrade this one"
        )
    return [m for m in MIGRATIONS if m.version not in done]
