"""The permalink quota (#46, item 7): per client (its network, as every cap), so many a minute
and so many bytes stored an hour; past either, 429 ``rate_limited`` with ``Retry-After``, and
another client shares as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.exceptions import RateLimited
from app.main import create_app
from app.settings import Settings
from app.store.base import canonical_json
from app.web.runtime.quota import PermalinkQuota
from tests.conftest import as_page
from tests.web.conftest import session_body

MINE, THEIRS = "2001:db8:1:2::1", "2001:db8:9:9::1"
HX = {"HX-Request": "true"}


def _client(app: FastAPI, address: str) -> TestClient:
    # No `with`: the test's first client holds the app's lifespan.
    return as_page(TestClient(app, client=(address, 40000)))


def _share(client: TestClient, n: int) -> Any:
    """A permalink of its own content for each ``n`` (a trace of n steps)."""
    return client.post(
        "/api/permalinks", json={**session_body(), "actions": [{"op": "step", "n": n}]}
    )


def _rate_limited(answer: Any, says: str) -> int:
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert error["code"] == "rate_limited"
    assert says in error["message"], error["message"]
    retry_after = int(answer.headers["Retry-After"])
    assert f"try again in {retry_after} s" in error["message"]
    return retry_after


@pytest.fixture
def app(engine: Engine, tmp_path: Any) -> Iterator[FastAPI]:
    settings = Settings(db_path=tmp_path / "permalinks.db", permalink_quota_per_minute=3)
    built = create_app(settings, engine=engine)
    with TestClient(built):
        yield built


def test_the_n_plus_first_permalink_of_a_minute_is_a_429_with_retry_after(app: FastAPI) -> None:
    mine, theirs = _client(app, MINE), _client(app, THEIRS)
    assert [_share(mine, n).status_code for n in (1, 2, 3)] == [201] * 3
    wait = _rate_limited(
        _share(mine, 4),
        "2001:db8:1:2::/64 created 3 permalinks in the past minute (at most 3)",
    )
    assert 1 <= wait <= 60
    # Another address of the same /64 is the same client; another /64 is not held to it.
    _rate_limited(_share(_client(app, "2001:db8:1:2::beef"), 5), "at most 3")
    assert _share(theirs, 4).status_code == 201
    quota = app.state.maskscope.permalink_quota
    assert quota.used(MINE) == (0, 0)  # counted by the /64, not the address
    created, stored = quota.used("2001:db8:1:2::/64")
    assert created == 3 and stored > 0


def test_the_page_s_share_counts_against_the_same_quota(app: FastAPI) -> None:
    mine = _client(app, MINE)
    assert [_share(mine, n).status_code for n in (1, 2)] == [201] * 2
    session_id = mine.post("/api/sessions", json=session_body(max_tokens=8)).json()["id"]
    shared = mine.post(f"/ui/sessions/{session_id}/share", data={"tests": "[]"}, headers=HX)
    assert shared.status_code == 200 and 'href="/s/' in shared.text, shared.text
    refused = mine.post(f"/ui/sessions/{session_id}/share", data={"tests": "[]"}, headers=HX)
    assert refused.status_code == 429
    assert refused.headers["HX-Retarget"] == "#toast"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "created 3 permalinks in the past minute" in refused.text


def test_the_bytes_quota_refuses_once_a_client_stored_its_share(
    engine: Engine, tmp_path: Any
) -> None:
    settings = Settings(db_path=tmp_path / "permalinks.db", permalink_quota_bytes=10_000)
    app = create_app(settings, engine=engine)
    store = app.state.maskscope.store

    def stored(answer: Any) -> int:
        assert answer.status_code == 201, answer.text
        return len(canonical_json(store.get(answer.json()["id"])[0]).encode("utf-8"))

    with TestClient(app):
        mine, theirs = _client(app, MINE), _client(app, THEIRS)
        total = stored(_share(mine, 1))
        assert total > 1_000
        assert _share(mine, 1).status_code == 200  # the same snapshot again stores nothing
        shares = 1
        while total < 10_000:
            shares += 1
            total += stored(_share(mine, shares))
        wait = _rate_limited(
            _share(mine, shares + 1),
            f"2001:db8:1:2::/64 stored {total:,} bytes of permalinks in the past hour (at most "
            "10,000)",
        )
        assert 60 < wait <= 3600  # an hour's window, not a minute's
        # Another client may still share; one that was stored already costs it nothing.
        assert _share(theirs, 1).status_code == 200
        size = stored(_share(theirs, shares + 1))
        assert app.state.maskscope.permalink_quota.used("2001:db8:9:9::/64") == (2, size)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_windows_slide_and_retry_after_is_when_the_oldest_leaves() -> None:
    clock = _Clock()
    quota = PermalinkQuota(2, 100, clock=clock)
    quota.admit("a")
    clock.now += 20
    quota.admit("a")
    with pytest.raises(RateLimited) as refused:
        quota.admit("a")
    assert refused.value.retry_after_s == 40  # the first leaves the minute 40 s from now
    quota.admit("b")  # another client
    clock.now += 40
    quota.admit("a")
    assert quota.used("a") == (2, 0)

    quota.charge("c", "s1", 60)
    clock.now += 600
    quota.charge("c", "s2", 60)
    quota.charge("c", "s2", 60)  # the same snapshot again: counted once
    assert quota.used("c") == (0, 120)
    with pytest.raises(RateLimited) as refused:
        quota.admit("c")
    assert refused.value.retry_after_s == 3000  # s1 leaves the hour; 60 bytes are under 100
    clock.now += 3000
    quota.admit("c")
    assert quota.used("c") == (1, 60)
