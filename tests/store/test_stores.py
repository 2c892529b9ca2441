"""The store interface, on both stores for real: SQLite files and a PostgreSQL server."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.exceptions import SnapshotTooLarge, StoreUnavailable
from app.store import SnapshotStore, open_store
from app.store.base import ID_PATTERN, Added, StoredRow, canonical_id, canonical_json
from app.store.migrations import LATEST, MIGRATIONS, VERSION_TABLE
from app.store.permalinks import SqliteStore
from app.store.postgres import PostgresStore, redacted


def _versions(url: str) -> list[int]:
    """The migration versions the database records, read with its own driver."""
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return [r[0] for r in db.execute(f"SELECT version FROM {VERSION_TABLE} ORDER BY 1")]
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute(f"SELECT version FROM {VERSION_TABLE} ORDER BY 1")]


def test_the_url_names_the_store(url: str, store: SnapshotStore) -> None:
    kind = SqliteStore if url.startswith("sqlite") else PostgresStore
    assert type(store) is kind


def test_equal_content_gets_an_equal_id(store: SnapshotStore) -> None:
    first, created = store.put({"b": 1, "a": "é"})
    again, created_again = store.put({"a": "é", "b": 1})
    other, _ = store.put({"a": "é", "b": 2})
    assert created and not created_again and first == again != other
    assert re.match(ID_PATTERN, first)
    assert first == canonical_id(canonical_json({"a": "é", "b": 1}))  # the same id on any store
    found = store.get(first)
    assert found is not None and found[0] == {"a": "é", "b": 1} and found[1] > 0
    assert store.get("nope") is None


def test_the_canonical_text_is_kept_byte_for_byte(url: str, store: SnapshotStore) -> None:
    content = {"z": [1, 2.5, None], "a": {"y": "\u00e9\u4e2d", "b": True}}
    snapshot_id, _ = store.put(content)
    (row,) = [r for r in store.rows() if r.id == snapshot_id]
    assert row.content == canonical_json(content) == '{"a":{"b":true,"y":"é中"},"z":[1,2.5,null]}'


def test_a_snapshot_has_a_size_limit(store: SnapshotStore) -> None:
    with pytest.raises(SnapshotTooLarge) as caught:
        store.put({"x": "a" * 5000})
    assert caught.value.message == "the snapshot is 5008 bytes; a permalink may hold 4000"


def test_twenty_threads_sharing_at_once_lose_nothing(store: SnapshotStore) -> None:
    contents = [{"thread": t, "n": n} for t in range(20) for n in range(10)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda c: (store.put(c)[0], c), contents + contents[:40]))
    assert len({snapshot_id for snapshot_id, _ in results}) == len(contents)
    for snapshot_id, content in results:
        found = store.get(snapshot_id)
        assert found is not None and found[0] == content
    assert len(list(store.rows(batch=7))) == len(contents)


def test_the_schema_is_migrated_once_however_often_it_is_opened(url: str) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:  # replicas starting at once
        stores = list(pool.map(lambda _: open_store(url), range(6)))
    try:
        assert all(s.schema_version() == LATEST for s in stores)
        assert _versions(url) == [m.version for m in MIGRATIONS]
        stores[0].put({"kept": True})
        again = open_store(url)
        assert again.schema_version() == LATEST and again.get(stores[0].put({"kept": True})[0])
        assert _versions(url) == [m.version for m in MIGRATIONS]
        again.close()
    finally:
        for opened in stores:
            opened.close()


def test_a_database_migrated_by_a_newer_maskscope_is_refused(url: str) -> None:
    open_store(url).close()
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?, 0)", (LATEST + 1,))
    else:
        with psycopg.connect(url) as conn:
            conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (%s, 0)", (LATEST + 1,))
    with pytest.raises(StoreUnavailable) as caught:
        open_store(url)
    assert f"at schema version {LATEST + 1}, newer than this Maskscope knows ({LATEST})" in (
        caught.value.message
    )


def test_rows_are_read_oldest_first_in_pages(store: SnapshotStore) -> None:
    rows = [
        StoredRow(canonical_id(f'{{"n":{n}}}'), f'{{"n":{n}}}', 1000.0 + n % 3) for n in range(9)
    ]
    assert store.add_rows(rows) == [Added.NEW] * 9
    read = list(store.rows(batch=2))
    assert read == sorted(rows, key=lambda r: (r.created_at, r.id))


def test_adding_rows_keeps_ids_and_times_and_reports_what_was_there(store: SnapshotStore) -> None:
    kept = StoredRow(canonical_id('{"a":1}', 16), '{"a":1}', 12.5)  # a 16-character id
    assert store.add_rows([kept]) == [Added.NEW]
    other = StoredRow(kept.id, '{"a":2}', 13.0)
    fresh = StoredRow(canonical_id('{"b":1}'), '{"b":1}', 14.0)
    assert store.add_rows([kept, other, fresh]) == [Added.SAME, Added.CONFLICT, Added.NEW]
    assert store.get(kept.id) == ({"a": 1}, 12.5)


def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    from tests.conftest import free_port

    url = f"postgresql://maskscope:hunter2-secret@127.0.0.1:{free_port()}/permalinks"
    with pytest.raises(StoreUnavailable) as caught:
        open_store(url)
    message = caught.value.message
    assert message.startswith(f"the permalink database {redacted(url)} is unavailable: ")
    assert "maskscope:***@127.0.0.1" in message and "hunter2" not in message


def test_a_url_that_names_no_store_is_refused() -> None:
    from app.exceptions import InvalidInput

    with pytest.raises(InvalidInput, match="starts with sqlite:/// or postgresql://"):
        open_store("mysql://h/db")


def test_the_store_works_again_after_the_server_drops_its_connections(
    postgres_url: str,
) -> None:
    store = open_store(postgres_url)
    first, _ = store.put({"before": 1})
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    after, created = store.put({"after": 1})  # the pool's dead connections are replaced
    assert created and store.get(first) is not None and store.get(after) is not None
    store.close()


def test_a_database_gone_while_serving_is_store_unavailable(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, timeout_s=2.0)
    snapshot_id, _ = store.put({"before": 1})
    name = postgres_url.rsplit("/", 1)[1]
    admin_url = postgres_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    for attempt in (lambda: store.put({"after": 1}), lambda: store.get(snapshot_id)):
        with pytest.raises(StoreUnavailable) as caught:
            attempt()
        assert caught.value.message.startswith(
            f"the permalink database {postgres_url} is unavailable: "
        )
    store.close()


def test_the_sqlite_default_needs_no_postgresql_driver(tmp_path: Path) -> None:
    """``make run`` needs nothing but SQLite: the app starts and shares with psycopg missing."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['psycopg'] = sys.modules['psycopg_pool'] = None\n"
        "from pathlib import Path\n"
        "from app.main import create_app\n"
        "from app.settings import Settings\n"
        "app = create_app(Settings(db_path=Path(sys.argv[1])))\n"
        "store = app.state.maskscope.store\n"
        "print(type(store).__name__, store.get(store.put({'ok': 1})[0])[0])\n"
    )
    root = Path(__file__).resolve().parent.parent.parent
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.db")], cwd=root,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SqliteStore {'ok': 1}"


def test_a_recorded_trace_is_kept_beside_the_snapshot_outside_its_id(store: SnapshotStore) -> None:
    content: dict[str, Any] = {"request": {"a": 1}, "actions": [{"op": "step", "n": 2}]}
    snapshot_id, _ = store.put(content)
    assert store.get_records(snapshot_id) is None  # nothing recorded yet: an older permalink
    records: list[dict[str, Any]] = [
        {"index": 0, "token_id": 90, "token_text": '{"', "prob": 0.5},
        {"index": 1},
    ]
    assert store.put_records(snapshot_id, records)
    assert store.get_records(snapshot_id) == records
    assert snapshot_id == canonical_id(canonical_json(content))  # the id hashes content only
    again, created = store.put(content)
    assert again == snapshot_id and not created
    found = store.get(snapshot_id)
    assert found is not None and found[0] == content  # the records are not in the content
    assert not store.put_records("nope-nope-nope", records)  # no such snapshot
    assert store.get_records("nope-nope-nope") is None


def test_a_recorded_trace_larger_than_the_limit_is_not_kept(store: SnapshotStore) -> None:
    snapshot_id, _ = store.put({"small": True})
    assert not store.put_records(snapshot_id, [{"text": "a" * 5000}])
    assert store.get_records(snapshot_id) is None and store.get(snapshot_id) is not None


def test_a_version_1_database_gains_the_records_column_and_keeps_its_rows(url: str) -> None:
    """A database made before migration 2: its snapshots keep their ids, without records."""
    content = '{"a":1}'
    old_id = canonical_id(content)
    first = MIGRATIONS[0]
    if url.startswith("sqlite:///"):
        import sqlite3

        db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        db.execute(f"CREATE TABLE {VERSION_TABLE} (version INTEGER PRIMARY KEY, applied_at REAL)")
        for statement in first.sqlite:
            db.execute(statement)
        db.execute(f"INSERT INTO {VERSION_TABLE} VALUES (1, 0)")
        db.execute("INSERT INTO snapshots VALUES (?, ?, 5.0)", (old_id, content))
        db.close()
    else:
        with psycopg.connect(url) as conn:
            conn.execute(
                f"CREATE TABLE {VERSION_TABLE} (version INTEGER PRIMARY KEY, "
                "applied_at DOUBLE PRECISION)"
            )
            for statement in first.postgres:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (1, 0)")
            conn.execute("INSERT INTO snapshots VALUES (%s, %s, 5.0)", (old_id, content))
    opened = open_store(url)
    try:
        assert opened.schema_version() == LATEST >= 2
        assert opened.get(old_id) == ({"a": 1}, 5.0)
        assert opened.get_records(old_id) is None
        assert opened.put_records(old_id, [{"index": 0}])
        assert opened.get_records(old_id) == [{"index": 0}]
        assert opened.put({"a": 1}) == (old_id, False)
    finally:
        opened.close()
