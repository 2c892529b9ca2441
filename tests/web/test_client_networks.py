"""One client is a network, not an address (#46, item 5): every address of an IPv6 /64 (what one
host is handed, and may pick from at will) is one client for the per-client caps, and so is an
IPv4 /24 when ``client_prefix_v4`` says so; a trusted proxy's client is keyed the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.middleware.clients import MAX_NAME, client_key
from tests.web.conftest import session_body

ONE_64 = [f"2001:db8:1:2::{i:x}" for i in (1, 2, 0xA, 0xBEEF, 0xFFFF)]
ANOTHER_64 = "2001:db8:1:3::1"


@pytest.mark.parametrize(
    ("host", "v4", "v6", "key"),
    [
        ("203.0.113.7", 32, 64, "203.0.113.7"),
        ("203.0.113.7", 24, 64, "203.0.113.0/24"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 32, 64, "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::1", 32, 48, "2001:db8:1::/48"),
        ("2001:db8::1", 32, 128, "2001:db8::1"),
        ("::1", 32, 64, "::/64"),
        ("::ffff:203.0.113.7", 24, 64, "203.0.113.0/24"),  # a dual-stack socket's IPv4 peer
        ("fe80::1%eth0", 32, 64, "fe80::/64"),
        ("testclient", 32, 64, "testclient"),
        ("x" * 500, 32, 64, "x" * MAX_NAME),
        ("", 32, 64, "unknown"),
    ],
)
def test_a_client_s_key_is_its_network_written_readably(
    host: str, v4: int, v6: int, key: str
) -> None:
    assert client_key(host, prefix_v4=v4, prefix_v6=v6) == key


def test_the_prefix_settings_refuse_lengths_too_short_or_too_long() -> None:
    for field, value in (
        ("client_prefix_v4", 0),
        ("client_prefix_v6", 8),
        ("client_prefix_v4", 33),
    ):
        with pytest.raises(ValidationError, match=field):
            Settings(**{field: value})  # type: ignore[arg-type]
    settings = Settings()
    assert (settings.client_prefix_v4, settings.client_prefix_v6) == (32, 64)


def _open_from(app: FastAPI, address: str, headers: dict[str, str] | None = None) -> str:
    # No `with`: the test's first client holds the app's lifespan.
    client = TestClient(app, client=(address, 40000))
    answer = client.post("/api/sessions", json=session_body(max_tokens=8), headers=headers)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def test_five_addresses_of_one_ipv6_64_share_one_client_s_sessions(
    engine: Engine, tmp_path: Path
) -> None:
    settings = Settings(db_path=tmp_path / "p.db", max_sessions=8, max_sessions_per_client=2)
    app = create_app(settings, engine=engine)
    with TestClient(app) as first:
        mine = [_open_from(app, address) for address in ONE_64]
        theirs = _open_from(app, ANOTHER_64)
        store = app.state.maskscope.sessions
        assert store.held_by("2001:db8:1:2::/64") == 2
        assert store.held_by("2001:db8:1:3::/64") == 1
        # The /64 kept its two newest; its older ones went to its own cap, not another's.
        assert [first.get(f"/api/sessions/{i}").status_code for i in mine] == [410] * 3 + [200] * 2
        assert (
            "newer session of the same client"
            in (first.get(f"/api/sessions/{mine[0]}").json()["error"]["message"])
        )
        assert first.get(f"/api/sessions/{theirs}").status_code == 200
        for session_id in mine[3:]:
            store.get(session_id).runs.start()  # both busy: the /64 is at its cap
        refused = TestClient(app, client=(ONE_64[0], 1)).post(
            "/api/sessions", json=session_body(max_tokens=8)
        )
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["message"].startswith(
            "all 2 sessions of 2001:db8:1:2::/64 are busy"
        )
        _open_from(app, ANOTHER_64)  # another /64 is not held to that cap


def test_ipv4_addresses_are_each_a_client_by_default_and_a_24_when_set(
    engine: Engine, tmp_path: Path
) -> None:
    for prefix, keys in ((32, ["198.51.100.7", "198.51.100.8"]), (24, ["198.51.100.0/24"] * 2)):
        settings = Settings(db_path=tmp_path / f"{prefix}.db", client_prefix_v4=prefix)
        app = create_app(settings, engine=engine)
        with TestClient(app):
            for address in ("198.51.100.7", "198.51.100.8"):
                _open_from(app, address)
            store = app.state.maskscope.sessions
            assert {k: store.held_by(k) for k in keys} == {k: keys.count(k) for k in keys}
            assert store.held_by("198.51.101.1") == 0


def test_a_trusted_proxy_s_clients_are_keyed_by_their_network(
    engine: Engine, tmp_path: Path
) -> None:
    settings = Settings(
        cache_dir=tmp_path,
        db_path=tmp_path / "p.db",
        trusted_proxies=["10.0.0.0/8"],
        max_sessions_per_client=2,
    )
    app = create_app(settings, engine=engine)
    with TestClient(app):
        for address in ONE_64:
            _open_from(app, "10.0.0.2", {"X-Forwarded-For": f"{address}, 10.0.0.9"})
        _open_from(app, "10.0.0.2", {"X-Forwarded-For": ANOTHER_64})
        store = app.state.maskscope.sessions
        assert store.held_by("2001:db8:1:2::/64") == 2
        assert store.held_by("2001:db8:1:3::/64") == 1
        assert store.held_by("10.0.0.2") == 0  # the proxy itself holds none
