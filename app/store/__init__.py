"""Permalinks: immutable snapshots in SQLite, and traces in canonical form."""

from app.store.permalinks import PermalinkStore, canonical_id
from app.store.trace import canonical_actions, compress

__all__ = ["PermalinkStore", "canonical_actions", "canonical_id", "compress"]
