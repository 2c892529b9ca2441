"""The Suite view's reports kept in their own table, on both stores for real (SQLite,
PostgreSQL): under the id the caller gives (a hash of what was checked), the first kept."""

from __future__ import annotations

from typing import Any

import pytest

from app.exceptions import SnapshotTooLarge
from app.store import SnapshotStore

SUITE: dict[str, Any] = {
    "sources": [{"name": "schemas/é.json", "kind": "json_schema", "text": "{}", "tests": None}],
    "report": {"summary": {"cases": 1, "failing": 0}, "cases": []},
}


def test_a_suite_is_kept_under_its_id_and_the_first_one_stays(store: SnapshotStore) -> None:
    assert store.get_suite("AAAAAAAAAAAA") is None
    assert store.put_suite("AAAAAAAAAAAA", SUITE, max_bytes=10_000)
    found = store.get_suite("AAAAAAAAAAAA")
    assert found is not None and found[0] == SUITE and found[1] > 0
    other = {**SUITE, "report": {"summary": {"cases": 1, "failing": 1}, "cases": []}}
    assert not store.put_suite("AAAAAAAAAAAA", other, max_bytes=10_000)  # checked again: kept
    assert store.get_suite("AAAAAAAAAAAA") == found
    assert store.get("AAAAAAAAAAAA") is None  # not a snapshot: a table of its own


def test_a_suite_larger_than_its_limit_is_refused(store: SnapshotStore) -> None:
    with pytest.raises(SnapshotTooLarge, match="MASKSCOPE_SUITE_REPORT_MAX_BYTES"):
        store.put_suite("BBBBBBBBBBBB", SUITE, max_bytes=50)
    assert store.get_suite("BBBBBBBBBBBB") is None
