"""``python -m app store copy``: an SQLite store into a real PostgreSQL, every link kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from app.cli.main import main
from app.settings import Settings
from app.store import open_store
from app.store.base import StoredRow, canonical_id, canonical_json
from app.store.permalinks import SqliteStore

ROOT = Path(__file__).resolve().parent.parent.parent


def _sqlite_with_snapshots(path: Path, count: int) -> dict[str, tuple[dict[str, object], float]]:
    store = SqliteStore(path)
    ids = [store.put({"n": -1})[0]]
    texts = [canonical_json({"n": n, "text": "é" * (n % 5)}) for n in range(count - 1)]
    # In one transaction: a put each would fsync each.
    store.add_rows([StoredRow(canonical_id(t), t, 1000.0 + n % 7) for n, t in enumerate(texts)])
    ids += [canonical_id(t) for t in texts]
    # A 16-character id, as a collision of the first 12 characters leaves it.
    long_text = '{"collided":true}'
    store.add_rows([StoredRow(canonical_id(long_text, 16), long_text, 7.25)])
    ids.append(canonical_id(long_text, 16))
    found = {snapshot_id: store.get(snapshot_id) for snapshot_id in ids}
    return {k: v for k, v in found.items() if v is not None}


def test_copy_keeps_every_id_content_and_time(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _sqlite_with_snapshots(tmp_path / "p.db", 1203)  # more than two batches
    settings = Settings(db_path=tmp_path / "p.db")
    assert main(["store", "copy", "--to", postgres_url], settings=settings) == 0
    out = capsys.readouterr().out
    assert f"copied {len(expected)} snapshots from sqlite:///{tmp_path / 'p.db'} to " in out
    assert "0 were there already, 0 conflicted, 0 damaged" in out
    target = open_store(postgres_url)
    assert {i: target.get(i) for i in expected} == expected
    target.close()
    # Again: nothing copied twice.
    assert main(["store", "copy", "--to", postgres_url], settings=settings) == 0
    assert "copied 0 snapshots" in capsys.readouterr().out
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT count(*) FROM snapshots").fetchone()
    assert row is not None and row[0] == len(expected)


def test_a_conflicting_snapshot_is_left_out_and_named(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = SqliteStore(tmp_path / "p.db")
    kept, _ = source.put({"a": 1})
    clash, _ = source.put({"a": 2})
    target = open_store(postgres_url)
    target.add_rows([StoredRow(clash, '{"other":true}', 1.0)])
    url = f"sqlite:///{tmp_path / 'p.db'}"
    assert main(["store", "copy", "--from", url, "--to", postgres_url]) == 1
    captured = capsys.readouterr()
    assert f"left out {clash}: the target holds other content under it" in captured.err
    assert "copied 1 snapshots" in captured.out and "1 conflicted" in captured.out
    assert target.get(kept) == source.get(kept)
    assert target.get(clash) == ({"other": True}, 1.0)
    target.close()


def test_the_command_line_copies_and_refuses_the_same_store(
    tmp_path: Path, postgres_url: str
) -> None:
    _sqlite_with_snapshots(tmp_path / "p.db", 3)
    url = f"sqlite:///{tmp_path / 'p.db'}"
    command = [sys.executable, "-m", "app", "store", "copy", "--from", url]
    done = subprocess.run([*command, "--to", postgres_url], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "copied 4 snapshots" in done.stdout, done.stderr
    same = subprocess.run([*command, "--to", url], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)  # fmt: skip
    assert same.returncode == 2
    assert f"error: --from and --to name the same store ({url})" in same.stderr


def test_a_recorded_trace_is_copied_with_its_snapshot(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = SqliteStore(tmp_path / "p.db")
    recorded, _ = source.put({"shared": "from the page"})
    source.put_records(recorded, [{"index": 0, "token_id": 7, "token_text": "é"}])
    older, _ = source.put({"shared": "through the API"})
    settings = Settings(db_path=tmp_path / "p.db")
    assert main(["store", "copy", "--to", postgres_url], settings=settings) == 0
    assert "copied 2 snapshots" in capsys.readouterr().out
    target = open_store(postgres_url)
    try:
        assert target.get_records(recorded) == [{"index": 0, "token_id": 7, "token_text": "é"}]
        assert target.get_records(older) is None
        assert target.get(recorded) == source.get(recorded)
    finally:
        target.close()
