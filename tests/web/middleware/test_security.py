"""Who may talk to the server (#27, item 6): the Host check, Origin and CSRF checks on
state-changing routes, the security headers, and the settings the team deployment reuses."""

from __future__ import annotations

import multiprocessing
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.cli.serve import hosts_warning
from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.middleware.security import (
    CSRF_COOKIE,
    SECRET_FILE,
    allowed_hosts,
    host_name,
    load_secret,
)
from tests.web.test_pages import _form

ATTACKER = "https://attacker.example"
COMPILE_JSON = {"kind": "regex", "source": "[a-z]{1,4}"}
HX = {"HX-Request": "true"}
CROSS_SITE = {"Sec-Fetch-Site": "cross-site"}
SAME_ORIGIN = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """An app answering to the tests' hosts (tests/conftest.py), its secret in a fresh dir."""
    cache = tmp_path_factory.mktemp("security-cache")
    return create_app(Settings(cache_dir=cache), engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    """A client with no cookie and no token: a stranger, until it loads the page."""
    with TestClient(app) as test_client:
        yield test_client


def _page_token(client: TestClient) -> str:
    """Load the page as a browser does: its cookie is kept, its token read from the <meta>."""
    html = client.get("/").text
    match = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">', html)
    assert match, html[:2000]
    assert client.cookies.get(CSRF_COOKIE)
    return match.group(1)


class _Answer(Protocol):
    """An answer of the in-process client or of httpx (the live server)."""

    @property
    def status_code(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    def json(self) -> Any: ...


def _refused(answer: _Answer, says: str) -> None:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "forbidden_origin"
    assert says in error["message"], error["message"]


# --- the Host check (DNS rebinding) ---------------------------------------------------------


def test_a_foreign_host_is_refused_on_the_api_and_on_a_page(client: TestClient) -> None:
    for path in ("/api/examples", "/", "/static/app.js"):
        answer = client.get(path, headers={"Host": "attacker.example"})
        _refused(answer, "does not answer to the host 'attacker.example'")
        assert "MASKSCOPE_ALLOWED_HOSTS" in answer.json()["error"]["message"]
    assert client.get("/api/examples", headers={"Host": "localhost:8000"}).status_code == 200


def test_health_probes_answer_any_host(client: TestClient) -> None:
    """A probe names the pod's address; /healthz says nothing a rebinding page could use."""
    assert client.get("/healthz", headers={"Host": "10.1.2.3:8000"}).status_code == 200


def test_the_default_hosts_are_the_listening_address_and_loopback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MASKSCOPE_ALLOWED_HOSTS")
    settings = Settings(cache_dir=tmp_path, host="192.168.1.20")
    assert allowed_hosts(settings) == {"192.168.1.20", "localhost", "127.0.0.1", "[::1]"}
    # Without the lifespan: no model is needed to be refused or to list the examples.
    client = TestClient(create_app(settings))
    for host in ("192.168.1.20:8000", "localhost", "127.0.0.1:8000", "[::1]:8000", "LocalHost"):
        assert client.get("/api/examples", headers={"Host": host}).status_code == 200, host
    for host in ("testserver", "attacker.example", "127.0.0.1.nip.io", "192.168.1.21"):
        _refused(client.get("/api/examples", headers={"Host": host}), repr(host_name(host)))


def test_a_wildcard_bind_serves_loopback_names_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MASKSCOPE_ALLOWED_HOSTS")
    for wildcard in ("0.0.0.0", "::"):
        settings = Settings(cache_dir=tmp_path, host=wildcard)
        assert allowed_hosts(settings) == {"localhost", "127.0.0.1", "[::1]"}
        warning = hosts_warning(settings)
        assert warning is not None and "MASKSCOPE_ALLOWED_HOSTS is not set" in warning
        assert "only localhost, 127.0.0.1 and [::1] are answered" in warning
    named = Settings(cache_dir=tmp_path, host="0.0.0.0", allowed_hosts=["maskscope.example"])
    assert hosts_warning(named) is None
    assert allowed_hosts(named) == {"maskscope.example"}
    assert hosts_warning(Settings(cache_dir=tmp_path)) is None


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("localhost", "localhost"),
        ("LOCALHOST:8000", "localhost"),
        ("example.com.", "example.com"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]:8000", "[::1]"),
        ("[::1]", "[::1]"),
        ("::1", "[::1]"),
        ("", ""),
    ],
)
def test_host_names_compare_without_port_or_case(value: str, name: str) -> None:
    assert host_name(value) == name


def test_the_host_settings_read_lists_and_refuse_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_ALLOWED_HOSTS", "maskscope.example, 10.0.0.5:8000")
    monkeypatch.setenv("MASKSCOPE_TRUSTED_PROXIES", '["10.0.0.0/8", "::1"]')
    settings = Settings()
    assert settings.allowed_hosts == ["maskscope.example", "10.0.0.5:8000"]
    assert settings.trusted_proxies == ["10.0.0.0/8", "::1"]
    with pytest.raises(ValueError, match="trusted proxies are IP addresses or CIDR networks"):
        Settings(trusted_proxies=["proxy.internal"])
    with pytest.raises(ValueError, match="allowed hosts are host names or addresses"):
        Settings(allowed_hosts=["http://maskscope.example/"])
    with pytest.raises(ValueError, match="the secret must be at least 16 characters"):
        Settings(secret=SecretStr("short"))


# --- Origin and CSRF on state-changing routes -----------------------------------------------


def test_a_cross_site_form_post_to_compile_is_refused(client: TestClient) -> None:
    token = _page_token(client)  # even with the page's token: the browser says where it is from
    form = _form()
    with_token = {"X-CSRF-Token": token}
    _refused(
        client.post("/ui/compile", data=form, headers={"Origin": ATTACKER, **with_token}),
        f"from the origin {ATTACKER!r} is refused",
    )
    _refused(
        client.post("/ui/compile", data=form, headers={"Origin": "null", **with_token}),
        "from the origin 'null' is refused",
    )
    _refused(
        client.post(
            "/ui/compile", data=form, headers={"Sec-Fetch-Site": "cross-site", **with_token}
        ),
        "a cross-site POST is refused",
    )
    # An old browser sends no Origin: the token is what it cannot forge.
    for headers in ({}, {"X-CSRF-Token": "0" * 64}):
        _refused(client.post("/ui/compile", data=form, headers=headers), "CSRF token")


def test_an_htmx_refusal_lands_in_the_toast(client: TestClient) -> None:
    answer = client.post("/ui/compile", data=_form(), headers={"Origin": ATTACKER, **HX})
    assert answer.status_code == 403
    assert answer.headers["HX-Retarget"] == "#toast"
    assert "is refused" in answer.text


def test_the_page_posts_with_its_token(client: TestClient) -> None:
    token = _page_token(client)
    headers = {
        "X-CSRF-Token": token,
        "Origin": "http://testserver",
        "Sec-Fetch-Site": "same-origin",
    }
    answer = client.post("/ui/compile", data=_form(), headers={**headers, **HX})
    assert answer.status_code == 200, answer.text
    assert "compiled" in answer.text
    # The token belongs to this client's cookie: another client's cookie does not match it.
    stranger = TestClient(client.app)  # no `with`: the module's client holds the lifespan
    stranger.get("/")
    _refused(stranger.post("/ui/compile", data=_form(), headers=headers), "CSRF token")


def test_json_api_calls_need_no_token(client: TestClient) -> None:
    fresh = TestClient(client.app)  # no cookie, no token, no Origin: curl, an SDK, the CLI
    assert fresh.post("/api/compile", json=COMPILE_JSON).status_code == 200
    assert fresh.post("/api/compile", json=COMPILE_JSON, headers=SAME_ORIGIN).status_code == 200
    _refused(
        fresh.post("/api/compile", json=COMPILE_JSON, headers={"Origin": ATTACKER}), "is refused"
    )


def test_a_text_plain_body_needs_the_token_and_is_never_json(client: TestClient) -> None:
    """A text/plain POST is what a cross-site form can send without a preflight."""
    body = '{"kind": "regex", "source": "[a-z]{1,4}"}'
    plain = {"Content-Type": "text/plain"}
    fresh = TestClient(client.app)
    _refused(fresh.post("/api/compile", content=body, headers=plain), "CSRF token")
    token = _page_token(fresh)
    answer = fresh.post("/api/compile", content=body, headers={**plain, "X-CSRF-Token": token})
    assert answer.status_code == 422, answer.text  # FastAPI reads no JSON from text/plain


def test_a_bodyless_ui_post_needs_the_token(client: TestClient) -> None:
    """fetch(url, {method: "POST"}) is a simple request too (the page's pause)."""
    fresh = TestClient(client.app)
    _refused(fresh.post("/ui/sessions/nope/pause"), "CSRF token")
    token = _page_token(fresh)
    answer = fresh.post("/ui/sessions/nope/pause", headers={"X-CSRF-Token": token})
    assert answer.json()["error"]["code"] == "session_not_found"


# --- the secret ------------------------------------------------------------------------------


def test_the_secret_is_made_once_with_mode_0600_and_reused(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path / "cache")
    first = load_secret(settings)
    path = tmp_path / "cache" / SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) == 64
    assert load_secret(settings) == first
    assert load_secret(Settings(cache_dir=tmp_path / "other")) != first
    given = Settings(cache_dir=tmp_path / "given", secret=SecretStr("s" * 32))
    assert load_secret(given) == b"s" * 32
    assert not (tmp_path / "given" / SECRET_FILE).exists()


def _secret_after(barrier: Any, cache_dir: Path) -> bytes:
    barrier.wait()
    return load_secret(Settings(cache_dir=cache_dir))


def test_processes_starting_at_once_all_get_the_one_whole_secret(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    with context.Pool(8) as pool:
        for round_ in range(10):
            cache_dir = tmp_path / str(round_)
            barrier = context.Manager().Barrier(8)
            secrets = pool.starmap(_secret_after, [(barrier, cache_dir)] * 8)
            assert len(set(secrets)) == 1
            assert (cache_dir / SECRET_FILE).read_bytes().strip() == secrets[0]
            assert [path.name for path in cache_dir.iterdir()] == [SECRET_FILE]


def test_a_token_made_by_one_replica_verifies_on_another(engine: Engine, tmp_path: Path) -> None:
    def replica(name: str, secret: str | None) -> FastAPI:
        given = SecretStr(secret) if secret else None
        return create_app(Settings(cache_dir=tmp_path / name, secret=given), engine=engine)

    shared = "a shared secret of the team's deployment"
    with TestClient(replica("a", shared)) as first:
        token = _page_token(first)
        cookie = first.cookies[CSRF_COOKIE]
    headers = {"X-CSRF-Token": token}
    for name, secret, ok in (("b", shared, True), ("c", None, False), ("d", shared + "!", False)):
        with TestClient(replica(name, secret), cookies={CSRF_COOKIE: cookie}) as other:
            answer = other.post("/ui/compile", data=_form(), headers=headers)
            assert (answer.status_code == 200) is ok, (name, answer.text)
            if not ok:
                _refused(answer, "CSRF token")
    # A restart keeps the generated secret: the page's token still verifies.
    with TestClient(replica("c", None)) as before:
        token = _page_token(before)
        cookie = before.cookies[CSRF_COOKIE]
    with TestClient(replica("c", None), cookies={CSRF_COOKIE: cookie}) as after:
        answer = after.post("/ui/compile", data=_form(), headers={"X-CSRF-Token": token})
        assert answer.status_code == 200, answer.text


# --- the security headers --------------------------------------------------------------------


def _secure(answer: _Answer) -> str:
    headers = answer.headers
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    policy = headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    assert "unsafe-eval" not in policy
    return directives["style-src"]


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    page = client.get("/")
    style = _secure(page)
    nonce = re.search(r'<meta name="csp-nonce" content="([^"]+)">', page.text)
    assert nonce and style == f"'self' 'nonce-{nonce.group(1)}'"  # CodeMirror's <style>
    assert (
        client.get("/").headers["Content-Security-Policy"]
        != page.headers["Content-Security-Policy"]
    )  # a fresh nonce per page
    for answer in (
        client.get("/api/examples"),
        client.post("/api/compile", json=COMPILE_JSON),
        client.get("/static/app.js"),
        client.get("/static/vendor/htmx.min.js"),
        client.get("/no/such/page"),
        client.get("/api/examples", headers={"Host": "attacker.example"}),
    ):
        _secure(answer)


def test_the_templates_hold_no_inline_script() -> None:
    """What the CSP refuses: inline scripts and handlers (data blocks are not scripts)."""
    templates = Path(__file__).resolve().parents[3] / "templates"
    for path in templates.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        for script in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in script or 'type="application/json"' in script, (path, script)
        assert not re.search(r"\son[a-z]+=", text), path
        assert "javascript:" not in text and "hx-on" not in text, path


def test_forbidden_origin_is_in_the_openapi(client: TestClient) -> None:
    paths: dict[str, Any] = client.get("/openapi.json").json()["paths"]
    for route in ("/api/compile", "/api/sessions", "/api/examples"):
        for operation in paths[route].values():
            assert "forbidden_origin" in operation["responses"]["403"]["description"], route


# --- trusted proxies -------------------------------------------------------------------------


def _proxied_app(tmp_path: Path) -> FastAPI:
    settings = Settings(
        cache_dir=tmp_path,
        allowed_hosts=["maskscope.example"],
        trusted_proxies=["10.0.0.0/8"],
    )
    app = create_app(settings)

    @app.get("/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        assert request.client is not None
        return {"client": request.client.host, "scheme": request.url.scheme}

    return app


def test_a_trusted_proxy_names_the_client_and_the_host(tmp_path: Path) -> None:
    app = _proxied_app(tmp_path)
    forwarded = {
        "X-Forwarded-For": "203.0.113.7, 10.0.0.9",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "maskscope.example",
    }
    proxy = TestClient(app, client=("10.0.0.2", 40000))
    answer = proxy.get("/whoami", headers=forwarded)
    assert answer.json() == {"client": "203.0.113.7", "scheme": "https"}
    # The browser's origin is the proxy's public one: a JSON POST from the page is accepted.
    origin = {"Origin": "https://maskscope.example", **forwarded}
    answer = proxy.post("/api/compile", json={}, headers=origin)
    assert answer.json()["error"]["code"] == "invalid_request"  # past the gate, to the route


def test_an_untrusted_peer_forwards_nothing(tmp_path: Path) -> None:
    app = _proxied_app(tmp_path)
    stranger = TestClient(app, client=("192.168.1.5", 40000))
    forwarded = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Host": "maskscope.example"}
    _refused(stranger.get("/whoami", headers=forwarded), "'testserver'")
    answer = stranger.get("/whoami", headers={**forwarded, "Host": "maskscope.example"})
    assert answer.json() == {"client": "192.168.1.5", "scheme": "http"}


# --- the real server -------------------------------------------------------------------------


def test_the_live_server_refuses_a_rebound_host_and_a_cross_site_post(live_server: str) -> None:
    with httpx.Client(base_url=live_server, timeout=60) as http:
        _refused(http.get("/api/examples", headers={"Host": "attacker.example"}), "host")
        _refused(http.get("/", headers={"Host": "attacker.example:8000"}), "host")
        _refused(http.post("/ui/compile", data=_form(), headers={"Origin": ATTACKER}), "refused")
        _refused(http.post("/ui/compile", data=_form()), "CSRF token")
        # uvicorn believes no X-Forwarded-Host from loopback: the Host header still decides.
        forwarded = {"Host": "attacker.example", "X-Forwarded-Host": "127.0.0.1"}
        _refused(http.get("/api/examples", headers=forwarded), "host")
        assert http.post("/api/compile", json=COMPILE_JSON).status_code == 200
        page = http.get("/")
        _secure(page)
        token = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page.text)
        assert token and page.cookies.get(CSRF_COOKIE)
        answer = http.post(
            "/ui/compile",
            data=_form(),
            headers={"X-CSRF-Token": token.group(1), "Origin": live_server, **HX},
        )
        assert answer.status_code == 200, answer.text
