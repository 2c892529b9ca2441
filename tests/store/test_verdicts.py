"""The tests' verdicts kept beside a snapshot, on both stores for real (SQLite, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import psycopg

from app.store import SnapshotStore, base, open_store
from app.store.base import canonical_id, canonical_json
from app.store.migrations import LATEST, MIGRATIONS, VERSION_TABLE

VERDICTS: dict[str, Any] = {
    "judged_with": {"model_id": "local", "xgrammar": "0.1"},
    "results": [{"passed": True, "normalized": "é", "verdicts": {"passed": True}}],
}
RECORDS = '[{"index":0}]'


def test_verdicts_are_kept_beside_the_snapshot_outside_its_id(store: SnapshotStore) -> None:
    content: dict[str, Any] = {"request": {"a": 1}, "tests": [{"text": "x", "expect": "pass"}]}
    snapshot_id, _ = store.put(content)
    assert store.get_verdicts(snapshot_id) is None  # none judged yet: an older permalink
    assert store.put_verdicts(snapshot_id, VERDICTS)
    assert store.get_verdicts(snapshot_id) == VERDICTS
    store.put_records(snapshot_id, [{"index": 0}])  # the recorded trace is another column
    assert store.get_verdicts(snapshot_id) == VERDICTS
    assert store.get_records(snapshot_id) == [{"index": 0}]
    again = {**VERDICTS, "error": {"code": "grammar_too_slow", "message": "m"}}
    assert store.put_verdicts(snapshot_id, again)  # judged again: replaced
    assert store.get_verdicts(snapshot_id) == again
    assert store.put(content) == (snapshot_id, False)
    assert snapshot_id == canonical_id(canonical_json(content))  # the id hashes content only
    found = store.get(snapshot_id)
    assert found is not None and found[0] == content
    assert not store.put_verdicts("nope-nope-nope", VERDICTS)  # no such snapshot
    assert store.get_verdicts("nope-nope-nope") is None


def test_verdicts_larger_than_their_limit_are_not_kept(store: SnapshotStore) -> None:
    snapshot_id, _ = store.put({"small": True})
    within = {"results": [{"normalized": "a" * (base.VERDICTS_FACTOR * 4000 - 100)}]}
    assert store.put_verdicts(snapshot_id, within)
    assert not store.put_verdicts(snapshot_id, {"results": [{"normalized": "a" * 16_001}]})
    assert store.get_verdicts(snapshot_id) == within


def _make_version_2(url: str, snapshot_id: str, content: str) -> None:
    """A database as Maskscope left it before migration 3, with one snapshot and its records."""
    earlier = [m for m in MIGRATIONS if m.version <= 2]
    if url.startswith("sqlite:///"):
        import sqlite3

        db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        db.execute(f"CREATE TABLE {VERSION_TABLE} (version INTEGER PRIMARY KEY, applied_at REAL)")
        for migration in earlier:
            for statement in migration.sqlite:
                db.execute(statement)
            db.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?, 0)", (migration.version,))
        db.execute("INSERT INTO snapshots VALUES (?, ?, 5.0, ?)", (snapshot_id, content, RECORDS))
        db.close()
        return
    with psycopg.connect(url) as conn:
        conn.execute(
            f"CREATE TABLE {VERSION_TABLE} (version INTEGER PRIMARY KEY, "
            "applied_at DOUBLE PRECISION)"
        )
        for migration in earlier:
            for statement in migration.postgres:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (%s, 0)", (migration.version,))
        conn.execute(
            "INSERT INTO snapshots VALUES (%s, %s, 5.0, %s)", (snapshot_id, content, RECORDS)
        )


def test_a_version_2_database_gains_the_verdicts_column_and_keeps_its_rows(url: str) -> None:
    content = '{"tests":[{"expect":"pass","text":"a"}]}'
    old_id = canonical_id(content)
    _make_version_2(url, old_id, content)
    opened = open_store(url)
    try:
        assert opened.schema_version() == LATEST >= 3
        assert opened.get(old_id) == ({"tests": [{"expect": "pass", "text": "a"}]}, 5.0)
        assert opened.get_records(old_id) == [{"index": 0}]
        assert opened.get_verdicts(old_id) is None  # never judged since: judged on a GET
        assert opened.put_verdicts(old_id, VERDICTS)
        assert opened.get_verdicts(old_id) == VERDICTS
        assert opened.put(opened.get(old_id)[0]) == (old_id, False)  # type: ignore[index]
    finally:
        opened.close()
    reopened = open_store(url)  # migrated once: opening again keeps what was kept
    try:
        assert reopened.get_verdicts(old_id) == VERDICTS
    finally:
        reopened.close()
