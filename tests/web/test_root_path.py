"""Served under a path: ``MASKSCOPE_ROOT_PATH``, and ``X-Forwarded-Prefix`` from a trusted
proxy only. Every URL the server writes starts with the prefix; both a proxy that strips it and
one that keeps it reach the routes; the page's CSRF rule still holds under it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.web.conftest import session_body

PROXY = "10.1.2.3"
# Every URL attribute of the page and its fragments, and the stream the runner opens.
_URLS = re.compile(r'(?:src|href|sse-connect|content)="(/[^"]*)"')


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """An app under ``/maskscope`` that trusts one proxy."""
    settings = Settings(
        root_path="/maskscope/",
        trusted_proxies=[PROXY],
        db_path=tmp_path_factory.mktemp("root") / "permalinks.sqlite",
    )
    return create_app(settings, engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    """A client from an address that is no proxy."""
    with TestClient(app) as test_client:
        yield as_page(test_client)


@pytest.fixture(scope="module")
def proxy(app: FastAPI) -> Iterator[TestClient]:
    """A client from the trusted proxy's address."""
    with TestClient(app, client=(PROXY, 40000)) as test_client:
        yield as_page(test_client)


def _urls(html: str) -> list[str]:
    return _URLS.findall(html)


@pytest.mark.parametrize("path", ["/maskscope/", "/", "/maskscope"])
def test_the_page_writes_every_url_under_the_prefix(client: TestClient, path: str) -> None:
    # "/": a proxy that strips the prefix; "/maskscope": the prefix alone.
    page = client.get(path)
    assert page.status_code == 200
    urls = _urls(page.text)
    assert any(u.startswith("/maskscope/static/") for u in urls)
    assert '<meta name="root-path" content="/maskscope">' in page.text
    assert [u for u in urls if not u.startswith("/maskscope")] == []


def test_assets_and_the_api_answer_with_or_without_the_prefix(client: TestClient) -> None:
    assert client.get("/maskscope/static/app.css").status_code == 200
    assert client.get("/static/app.css").status_code == 200
    assert client.get("/maskscope/api/models").status_code == 200
    schema = client.get("/maskscope/openapi.json").json()
    assert schema["servers"] == [{"url": "/maskscope"}]
    assert "/maskscope/openapi.json" in client.get("/maskscope/docs").text


def test_a_permalink_url_is_under_the_prefix_and_opens(client: TestClient) -> None:
    body = {**session_body(max_tokens=4), "actions": [{"op": "step", "n": 2}]}
    stored = client.post("/maskscope/api/permalinks", json=body)
    assert stored.status_code in (200, 201), stored.text
    url = stored.json()["url"]
    assert url == f"/maskscope/s/{stored.json()['id']}"
    opened = client.get(url)
    assert opened.status_code == 200
    assert [u for u in _urls(opened.text) if not u.startswith("/maskscope")] == []


def test_the_runner_streams_under_the_prefix_and_the_share_link_too(client: TestClient) -> None:
    session = client.post("/maskscope/api/sessions", json=session_body(max_tokens=3)).json()
    runner = client.post(f"/maskscope/ui/sessions/{session['id']}/run")
    assert runner.status_code == 200, runner.text
    stream = f"/maskscope/api/sessions/{session['id']}/events?after=-1"
    assert f'sse-connect="{stream}"' in runner.text
    with client.stream("GET", stream) as events:
        text = "".join(events.iter_text())
    assert text.count("event: step") == 3 and "event: end" in text
    share = client.post(f"/maskscope/ui/sessions/{session['id']}/share", data={"tests": "[]"})
    assert share.status_code == 200, share.text
    link = re.search(r'data-url="([^"]*)"', share.text)
    assert link and link.group(1).startswith("http://testserver/maskscope/s/")
    assert [u for u in _urls(share.text) if not u.startswith("/maskscope/s/")] == []


def test_a_trusted_proxy_s_prefix_is_used_and_nobody_else_s(
    client: TestClient, proxy: TestClient
) -> None:
    from_proxy = proxy.get("/", headers={"X-Forwarded-Prefix": "/tools/ms"}).text
    assert '<meta name="root-path" content="/tools/ms">' in from_proxy
    assert all(u.startswith("/tools/ms") for u in _urls(from_proxy))
    from_anyone = client.get("/", headers={"X-Forwarded-Prefix": "/evil"}).text
    assert "/evil" not in from_anyone
    # A prefix that is no plain path is ignored, even from the proxy.
    odd = proxy.get("/", headers={"X-Forwarded-Prefix": '/x"><i id=evil>'}).text
    assert '<meta name="root-path" content="/maskscope">' in odd and "evil" not in odd


def test_the_page_s_routes_still_need_the_csrf_token_under_the_prefix(app: FastAPI) -> None:
    with TestClient(app) as bare:  # no CSRF cookie nor token
        for path in ("/maskscope/ui/compile", "/ui/compile"):
            refused = bare.post(path, data={"kind": "regex", "source": "a"})
            assert refused.status_code == 403, path
            assert refused.json()["error"]["code"] == "forbidden_origin"


@pytest.mark.parametrize("value", ["maskscope", "/mask scope", "/a//b", '/x"'])
def test_a_root_path_that_is_no_plain_path_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="the root path is a URL path"):
        Settings(root_path=value)


def test_a_root_path_is_kept_without_its_trailing_slash() -> None:
    assert Settings(root_path="/maskscope/").root_path == "/maskscope"
    assert Settings(root_path="/").root_path == ""
