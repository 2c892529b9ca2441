"""The SQLite store, for real: a file, threads, other processes, SIGKILL."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.exceptions import SnapshotTooLarge
from app.store.permalinks import ID_PATTERN, PermalinkStore

ROOT = Path(__file__).resolve().parent.parent.parent


def test_equal_content_gets_an_equal_id(tmp_path: Path) -> None:
    store = PermalinkStore(tmp_path / "p.db")
    first, created = store.put({"b": 1, "a": "é"})
    again, created_again = store.put({"a": "é", "b": 1})
    other, _ = store.put({"a": "é", "b": 2})
    assert created and not created_again and first == again != other
    assert re.match(ID_PATTERN, first)
    found = store.get(first)
    assert found is not None and found[0] == {"a": "é", "b": 1}
    assert store.get("nope") is None


def test_the_database_is_in_wal_mode(tmp_path: Path) -> None:
    PermalinkStore(tmp_path / "p.db")
    with sqlite3.connect(tmp_path / "p.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_snapshot_has_a_size_limit(tmp_path: Path) -> None:
    store = PermalinkStore(tmp_path / "p.db", max_bytes=2000)
    with pytest.raises(SnapshotTooLarge) as caught:
        store.put({"x": "a" * 5000})
    assert caught.value.message == "the snapshot is 5008 bytes; a permalink may hold 2000"


def test_twenty_threads_sharing_at_once_lose_nothing(tmp_path: Path) -> None:
    store = PermalinkStore(tmp_path / "p.db")
    contents = [{"thread": t, "n": n} for t in range(20) for n in range(10)]

    def share(content: dict[str, int]) -> tuple[str, dict[str, int]]:
        return store.put(content)[0], content

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(share, contents + contents[:40]))  # some shared twice
    ids = {snapshot_id for snapshot_id, _ in results}
    assert len(ids) == len(contents)
    for snapshot_id, content in results:
        found = store.get(snapshot_id)
        assert found is not None and found[0] == content
    with sqlite3.connect(tmp_path / "p.db") as db:
        assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] == len(contents)


def test_another_process_reads_what_one_wrote(tmp_path: Path) -> None:
    snapshot_id, _ = PermalinkStore(tmp_path / "p.db").put({"hello": "world"})
    code = (
        "import sys, json; from pathlib import Path; from app.store import PermalinkStore; "
        "print(json.dumps(PermalinkStore(Path(sys.argv[1])).get(sys.argv[2])[0]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.db"), snapshot_id],
                         capture_output=True, text=True, check=True, cwd=ROOT)  # fmt: skip
    assert out.stdout.strip() == '{"hello": "world"}'


WRITER = textwrap.dedent(
    """
    import sys, uuid
    from pathlib import Path
    from app.store import PermalinkStore
    store = PermalinkStore(Path(sys.argv[1]))
    while True:
        snapshot_id, _ = store.put({"n": str(uuid.uuid4()), "pad": "x" * 2000})
        print(snapshot_id, flush=True)  # acknowledged: the write has returned
    """
)


def test_sigkill_during_a_burst_keeps_every_acknowledged_permalink(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)  # fmt: skip
    assert writer.stdout is not None
    acknowledged: list[str] = []
    deadline = time.monotonic() + 20
    while len(acknowledged) < 50 and time.monotonic() < deadline:
        acknowledged.append(writer.stdout.readline().strip())
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    acknowledged += [line.strip() for line in writer.stdout.read().splitlines() if line.strip()]
    assert len(acknowledged) >= 50
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = PermalinkStore(db)
    assert all(store.get(snapshot_id) is not None for snapshot_id in acknowledged)
