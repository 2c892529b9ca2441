"""The Origin check compares scheme, host and port (#46, item 10): a page on another port of this
host, or on the other scheme, is another origin (403 ``forbidden_origin``), even when only the
CSRF token would have stopped it before; the page's own requests, a trusted proxy's public
origin and the default ports (http 80, https 443) still pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.middleware.security import origin_of

COMPILE_JSON = {"kind": "regex", "source": "[a-z]{1,4}"}


def _refused(answer: Any, origin: str) -> None:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "forbidden_origin"
    assert f"from the origin {origin!r} is refused" in error["message"], error["message"]


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://testserver", ("http", "testserver", 80)),
        ("http://TestServer:80", ("http", "testserver", 80)),
        ("https://maskscope.example", ("https", "maskscope.example", 443)),
        ("https://maskscope.example:443", ("https", "maskscope.example", 443)),
        ("https://maskscope.example:8443", ("https", "maskscope.example", 8443)),
        ("http://[::1]:8000", ("http", "[::1]", 8000)),
        ("null", None),
        ("file://", None),
        ("ftp://maskscope.example", None),
        ("http://maskscope.example:99999", None),
        ("http://maskscope.example:port", None),
        ("http://user@maskscope.example", None),
        ("http://maskscope.example/path", None),
    ],
)
def test_an_origin_is_its_scheme_host_and_port(
    url: str, origin: tuple[str, str, int] | None
) -> None:
    assert origin_of(url) == origin


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    directory = tmp_path_factory.mktemp("origin")
    settings = Settings(cache_dir=directory, db_path=directory / "p.db")
    with TestClient(create_app(settings, engine=engine)) as test_client:
        yield test_client


@pytest.mark.parametrize(
    "origin", ["http://testserver:8080", "http://testserver:443", "https://testserver"]
)
def test_a_post_from_another_port_or_scheme_of_this_host_is_refused(
    client: TestClient, origin: str
) -> None:
    _refused(client.post("/api/compile", json=COMPILE_JSON, headers={"Origin": origin}), origin)
    for own in ("http://testserver", "http://testserver:80"):  # with or without its default port
        answer = client.post("/api/compile", json=COMPILE_JSON, headers={"Origin": own})
        assert answer.status_code == 200, answer.text


def test_another_allowed_name_passes_on_this_scheme_and_port_only(
    engine: Engine, tmp_path: Path
) -> None:
    hosts = ["maskscope.example", "10.0.0.5"]
    settings = Settings(cache_dir=tmp_path, db_path=tmp_path / "p.db", allowed_hosts=hosts)
    app = create_app(settings, engine=engine)
    with TestClient(app, base_url="http://10.0.0.5:8000") as client:
        same = {"Origin": "http://maskscope.example:8000"}
        assert client.post("/api/compile", json=COMPILE_JSON, headers=same).status_code == 200
        for origin in ("http://maskscope.example:9000", "http://maskscope.example"):
            answer = client.post("/api/compile", json=COMPILE_JSON, headers={"Origin": origin})
            _refused(answer, origin)


def _proxied(tmp_path: Path) -> FastAPI:
    settings = Settings(
        cache_dir=tmp_path,
        db_path=tmp_path / "p.db",
        allowed_hosts=["maskscope.example"],
        trusted_proxies=["10.0.0.0/8"],
    )
    return create_app(settings)


@pytest.mark.parametrize(
    ("proto", "host", "passes", "refused"),
    [
        ("https", "maskscope.example", "https://maskscope.example", "http://maskscope.example"),
        (
            "https",
            "maskscope.example:8443",
            "https://maskscope.example:8443",
            "https://maskscope.example",
        ),
        ("http", "maskscope.example", "http://maskscope.example:80", "https://maskscope.example"),
    ],
)
def test_behind_a_trusted_proxy_the_origin_is_the_public_one_it_names(
    tmp_path: Path, proto: str, host: str, passes: str, refused: str
) -> None:
    proxy = TestClient(_proxied(tmp_path), client=("10.0.0.2", 40000))
    forwarded = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": proto,
                 "X-Forwarded-Host": host}  # fmt: skip
    answer = proxy.post("/api/compile", json={}, headers={"Origin": passes, **forwarded})
    assert answer.json()["error"]["code"] == "invalid_request"  # past the gate, to the route
    answer = proxy.post("/api/compile", json={}, headers={"Origin": refused, **forwarded})
    _refused(answer, refused)


def test_the_live_server_refuses_another_port_and_scheme_and_takes_its_own(
    live_server: str,
) -> None:
    port = urlsplit(live_server).port
    assert port is not None
    with httpx.Client(base_url=live_server, timeout=60) as http:
        for origin in (f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}"):
            answer = http.post("/api/compile", json=COMPILE_JSON, headers={"Origin": origin})
            _refused(answer, origin)
        own = http.post("/api/compile", json=COMPILE_JSON, headers={"Origin": live_server})
        assert own.status_code == 200, own.text
