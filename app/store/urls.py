"""``MASKSCOPE_DB_URL`` -> the store it names."""

from __future__ import annotations

from pathlib import Path

from app.exceptions import InvalidInput
from app.store.base import SnapshotStore

__all__ = ["SCHEMES", "open_store", "sqlite_path"]

#: The URL schemes a store is named by.
SCHEMES = ("sqlite:///", "postgresql://", "postgres://")


def sqlite_path(url: str) -> Path:
    """The file a ``sqlite:///`` URL names: ``sqlite:///rel.db`` is relative, ``sqlite:////abs``
    absolute (SQLAlchemy's spelling)."""
    return Path(url.removeprefix("sqlite:///")).expanduser()


def open_store(url: str, *, max_bytes: int = 256 * 1024) -> SnapshotStore:
    """The store ``url`` names, opened, its schema migrated.

    Raises:
        InvalidInput: the URL names no store.
        StoreUnavailable: the database cannot be reached.
    """
    if url.startswith("sqlite:///"):
        from app.store.permalinks import SqliteStore

        return SqliteStore(sqlite_path(url), max_bytes=max_bytes)
    if url.startswith(("postgresql://", "postgres://")):
        # Imported here: psycopg is needed only by a team that configures PostgreSQL.
        from app.store.postgres import PostgresStore

        return PostgresStore(url, max_bytes=max_bytes)
    raise InvalidInput(f"a database URL starts with sqlite:/// or postgresql://, got {url!r}")
