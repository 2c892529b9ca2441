"""Permalinks: immutable snapshots in SQLite or PostgreSQL, and traces in canonical form."""

from app.store.base import SnapshotStore, canonical_id
from app.store.permalinks import PermalinkStore, SqliteStore
from app.store.trace import canonical_actions, compress
from app.store.urls import open_store

__all__ = [
    "PermalinkStore",
    "SnapshotStore",
    "SqliteStore",
    "canonical_actions",
    "canonical_id",
    "compress",
    "open_store",
]
