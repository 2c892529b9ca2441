"""Behind a real nginx and a real Caddy, under ``/maskscope/``: the page, its stream, its links,
the replica routing of docs/proxy/, and a SIGTERM the page hears of.

One ``python -m app serve`` (``MASKSCOPE_ROOT_PATH=/maskscope``, the proxies trusted) behind
nginx and Caddy running the documented configurations, whose two replicas are the server itself
and a relay to it (so that "replica b" can be taken away). The SIGTERM test runs last: it stops
the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Request, expect

from tests.app_process import AppProcess
from tests.caddy import Caddy
from tests.conftest import free_port
from tests.nginx import Nginx
from tests.tcp_proxy import TcpProxy

# Real nginx and Caddy in front of the app: the server tier (docs/testing.md)
pytestmark = pytest.mark.server

DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "proxy"
PREFIX = "/maskscope"


@dataclass
class Proxied:
    """The server, the relay that is replica b, and nginx's and Caddy's root URLs (without
    the prefix)."""

    app: AppProcess
    replica_b: TcpProxy
    root: str
    caddy_root: str

    @property
    def base(self) -> str:
        """The app's URL through nginx, under the prefix (no slash at the end)."""
        return self.root + PREFIX


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """The documented nginx configuration in front of the server."""
    directory = tmp_path_factory.mktemp("nginx")
    app = AppProcess(
        "proxied",
        port=free_port(),
        env={
            "MASKSCOPE_ROOT_PATH": PREFIX,
            "MASKSCOPE_TRUSTED_PROXIES": "127.0.0.1",
            "MASKSCOPE_DB_PATH": str(directory / "permalinks.sqlite"),
            # replica "a" of the documented two, as a team runs it: its session ids start
            # with "a." (a server alone answers 421 for a session of replica "a")
            "MASKSCOPE_REPLICA_ID": "a",
            "MASKSCOPE_SECRET": "proxy-test-secret-0123456789",
        },
    )
    app.start()
    replica_b = TcpProxy(app.port)
    port = free_port()
    site = (
        (DOCS / "nginx.conf")
        .read_text()
        .replace("10.0.0.11:8000", f"127.0.0.1:{app.port}")
        .replace("10.0.0.12:8000", f"127.0.0.1:{replica_b.port}")
        .replace("listen 80;", f"listen 127.0.0.1:{port};")
    )
    nginx = Nginx(directory, site, port)
    nginx.start()
    caddy_port = free_port()
    caddy_site = (
        (DOCS / "Caddyfile").read_text()
        .replace("10.0.0.11:8000", f"127.0.0.1:{app.port}")
        .replace("10.0.0.12:8000", f"127.0.0.1:{replica_b.port}")
        .replace("maskscope.example {", f"http://127.0.0.1:{caddy_port} {{")
    )  # fmt: skip
    caddy = Caddy(tmp_path_factory.mktemp("caddy"), caddy_site, caddy_port)
    caddy.start()
    try:
        yield Proxied(app, replica_b, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{caddy_port}")
    finally:
        caddy.stop()
        nginx.stop()
        replica_b.stop()
        app.stop()


def _requests(page: Page) -> list[str]:
    urls: list[str] = []

    def record(request: Request) -> None:
        urls.append(request.url)

    page.on("request", record)
    return urls


def test_the_page_under_the_prefix_compiles_streams_and_shares(
    page: Page, proxied: Proxied
) -> None:
    asked = _requests(page)
    page.goto(f"{proxied.base}/")
    page.select_option("#example", "pricing")
    # This server's first compile starts its compile workers (tests run without the warm-up):
    # seconds on a loaded machine, beyond the default 5 s of an expectation.
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled", timeout=60_000)

    # The stream's steps reach the page while it runs: a pause after the second one stops the
    # run far from its end (a buffering proxy would deliver them all at the end, stopped).
    page.fill('input[name="max_tokens"]', "300")
    page.click("#btn-run")
    expect(page.locator("#runner[data-running]")).to_have_count(1)
    page.wait_for_function("() => document.querySelectorAll('#tokens .chip').length >= 2")
    page.click("#btn-run")
    expect(page.locator("#runner[data-running]")).to_have_count(0, timeout=60_000)
    expect(page.locator("#status")).to_have_attribute("data-done", "false")
    steps = page.locator("#tokens .chip").count()
    assert 2 <= steps < 300
    expect(page.locator("#status .count")).to_have_text(f"{steps} / 300 steps")

    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    url = link.get_attribute("data-url")
    assert url is not None and url.startswith(f"{proxied.base}/s/"), url
    before = page.locator("#tokens").inner_text()
    page.goto(url)
    expect(page.locator("#tokens .chip")).to_have_count(steps, timeout=60_000)
    assert page.locator("#tokens").inner_text() == before

    outside = [u for u in asked if not u.startswith(f"{proxied.base}/") and u.startswith("http")]
    assert outside == []
    assert any("/maskscope/api/sessions/" in u and "/events" in u for u in asked)
    assert any(u.startswith(f"{proxied.base}/static/") for u in asked)
    assert any(u.startswith(f"{proxied.base}/ui/compile") for u in asked)


def test_a_session_is_routed_to_the_replica_its_id_names(proxied: Proxied) -> None:
    proxied.replica_b.stop()  # replica b is gone: what nginx sends there fails
    try:
        to_b = httpx.get(f"{proxied.base}/api/sessions/b.Xk3abc")
        to_a = httpx.get(f"{proxied.base}/api/sessions/a.Xk3abc")
        page_b = httpx.post(f"{proxied.base}/ui/sessions/b.Xk3abc/pause")
        anywhere = [httpx.get(f"{proxied.base}/api/models") for _ in range(4)]
    finally:
        proxied.replica_b.start()
    assert to_b.status_code == 502 and "nginx" in to_b.text
    assert page_b.status_code == 502
    assert to_a.status_code == 404
    assert to_a.json()["error"]["code"] == "session_not_found"
    assert [r.status_code for r in anywhere] == [200] * 4  # any replica: b is skipped


def test_openapi_and_the_docs_are_under_the_prefix(proxied: Proxied) -> None:
    schema = httpx.get(f"{proxied.base}/openapi.json").json()
    assert schema["servers"] == [{"url": PREFIX}]
    assert f"{PREFIX}/openapi.json" in httpx.get(f"{proxied.base}/docs").text
    bare = httpx.get(proxied.root + PREFIX)
    assert bare.status_code == 301 and bare.headers["location"].endswith(f"{PREFIX}/")
    # The prefix, from nginx (trusted), is also what the JSON API writes.
    assert "/maskscope/s/" in _permalink_url(proxied)


def _permalink_url(proxied: Proxied) -> str:
    body = {
        "grammar": {"kind": "regex", "source": "(yes|no)"},
        "raw_prompt": "Answer: ",
        "max_tokens": 3,
        "actions": [{"op": "step", "n": 1}],
    }
    answer = httpx.post(f"{proxied.base}/api/permalinks", json=body, timeout=60)
    assert answer.status_code in (200, 201), answer.text
    url: str = answer.json()["url"]
    return url


def test_the_caddyfile_serves_under_the_prefix_streams_and_routes(proxied: Proxied) -> None:
    base = proxied.caddy_root + PREFIX
    page = httpx.get(f"{base}/")
    assert page.status_code == 200 and 'href="/maskscope/static/app.css"' in page.text
    body = {"grammar": {"kind": "regex", "source": "[a-z ]{1,400}"}, "raw_prompt": "Say: "}
    session = httpx.post(f"{base}/api/sessions", json={**body, "max_tokens": 300}, timeout=60)
    assert session.status_code == 200, session.text
    stream = f"{base}/api/sessions/{session.json()['id']}/events?format=json"
    events: list[str] = []
    with httpx.stream("GET", stream, timeout=60) as answer:
        for line in answer.iter_lines():
            if line.startswith("event: "):
                events.append(line.removeprefix("event: "))
                if events == ["step"]:  # the first step has come through: the run goes on
                    pause = f"{base}/api/sessions/{session.json()['id']}/pause"
                    assert httpx.post(pause).status_code == 200
    assert events[-2:] == ["paused", "end"], events
    assert events.count("step") < 300

    proxied.replica_b.stop()
    try:
        to_b = httpx.get(f"{base}/api/sessions/b.Xk3abc")
        to_a = httpx.get(f"{base}/api/sessions/a.Xk3abc")
    finally:
        proxied.replica_b.start()
    assert to_b.status_code == 502
    assert to_a.status_code == 404 and to_a.json()["error"]["code"] == "session_not_found"


def test_sigterm_ends_the_page_s_stream_saying_the_server_restarts(
    page: Page, proxied: Proxied
) -> None:
    # Last in this module: the server stops. Replica b (a relay to it) goes first: nginx then
    # sends everything to the server itself, and nothing is relayed to a server gone.
    proxied.replica_b.stop()
    page.goto(f"{proxied.base}/")
    page.select_option("#example", "pricing")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.fill('input[name="max_tokens"]', "4000")
    page.click("#btn-run")
    page.wait_for_function("() => document.querySelectorAll('#tokens .chip').length >= 2")
    proxied.app.terminate()
    expect(page.locator("#status")).to_contain_text("the server is restarting", timeout=15_000)
    expect(page.locator("#runner[data-running]")).to_have_count(0)
    proxied.app.wait(timeout_s=10)
