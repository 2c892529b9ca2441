"""Who may talk to the server: the Host check, Origin and CSRF checks, and security headers.

Two ASGI middlewares:

- :class:`TrustedProxies` believes ``X-Forwarded-For``, ``-Proto``, ``-Host`` and ``-Prefix``
  only from the addresses of ``MASKSCOPE_TRUSTED_PROXIES``, so that ``request.client.host`` is
  the client's address, the Host checked is the one the client asked for, and the URLs written
  start with the path the proxy serves the app under (:mod:`app.web.middleware.rootpath`).
- :class:`SecurityGate` refuses a Host outside ``MASKSCOPE_ALLOWED_HOSTS`` (DNS rebinding), a
  state-changing request from another origin or without the page's CSRF token when a browser
  could have sent it cross-site, and puts the security headers on every response.

The CSRF token is a signed double-submit: the page's cookie holds a random nonce, the page holds
``HMAC(secret, nonce)`` and sends it back in the ``X-CSRF-Token`` header. Only the secret
verifies it, so every replica sharing ``MASKSCOPE_SECRET`` accepts the others' tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import tempfile
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.exceptions import ForbiddenOrigin
from app.settings import Settings
from app.web.errors import error_response, status_of
from app.web.middleware.rootpath import route_path

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "SECRET_FILE",
    "CsrfSigner",
    "SecurityGate",
    "TrustedProxies",
    "allowed_hosts",
    "host_name",
    "is_wildcard",
    "load_secret",
    "origin_of",
]

log = logging.getLogger(__name__)

CSRF_COOKIE = "maskscope_csrf"
CSRF_HEADER = "X-CSRF-Token"
SECRET_FILE = "secret"

_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The bodies a browser sends cross-site without a CORS preflight (a form or a no-cors fetch).
_SIMPLE_TYPES = frozenset(
    {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}
)
_WILDCARDS = frozenset({"0.0.0.0", "[::]"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
# Health probes (a load balancer's, Kubernetes') name the pod's address: they answer nothing
# a rebinding page could use, so they need no allowed host.
_PROBES = frozenset({"/healthz", "/readyz"})


def host_name(value: str) -> str:
    """A Host header or an allowed-host entry as compared: lower case, no port, IPv6 in
    brackets (``[::1]:8000`` and ``::1`` are both ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    if value.count(":") > 1:
        return f"[{value}]"
    return value.partition(":")[0].rstrip(".")


def origin_of(url: str) -> tuple[str, str, int] | None:
    """An origin as compared: scheme, host (as :func:`host_name` writes it) and port, the
    scheme's default port spelled out (``http://Host`` is ``("http", "host", 80)``); None for
    anything that is no http(s) origin (``null``, a path, a user, a bad port)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, host_name(parts.hostname), port


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """The host names this server answers to: ``MASKSCOPE_ALLOWED_HOSTS``, or by default the
    listening address (unless a wildcard), ``localhost``, ``127.0.0.1`` and ``[::1]``."""
    if settings.allowed_hosts is not None:
        return frozenset(host_name(h) for h in settings.allowed_hosts)
    listening = host_name(settings.host)
    return frozenset({*_LOOPBACK, *([] if listening in _WILDCARDS else [listening])})


def is_wildcard(host: str) -> bool:
    """Whether binding ``host`` listens on every address (``0.0.0.0``, ``::``)."""
    return host_name(host) in _WILDCARDS


def load_secret(settings: Settings) -> bytes:
    """``MASKSCOPE_SECRET``, or the one kept in ``cache_dir/secret`` (made once, mode 0600)."""
    if settings.secret is not None:
        return settings.secret.get_secret_value().encode()
    path = Path(settings.cache_dir) / SECRET_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return _read_secret(path)
    # Written whole beside it, then linked into place: a process starting at the same moment
    # either finds no file or the whole secret, and both agree on the first link's.
    descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=".secret-")
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32))
        os.link(draft, path)
        log.info("generated the CSRF secret in %s (set MASKSCOPE_SECRET to share one)", path)
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 16:
        raise RuntimeError(f"{path} holds no usable secret: delete it to make a new one")
    if path.stat().st_mode & 0o077:
        log.warning("%s is readable by other users: chmod 600 it", path)
    return text.encode()


class CsrfSigner:
    """Makes and checks the page's CSRF tokens with one secret.

    Args:
        secret: the key of the HMAC; replicas sharing it verify each other's tokens.
    """

    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"maskscope csrf\0" + secret).digest()

    @staticmethod
    def new_nonce() -> str:
        """A fresh random value for the page's cookie."""
        return secrets.token_urlsafe(18)

    def token(self, nonce: str) -> str:
        """The token the page sends back for the cookie ``nonce``."""
        return hmac.new(self._key, nonce.encode(), hashlib.sha256).hexdigest()

    def verify(self, nonce: str | None, token: str | None) -> bool:
        """Whether ``token`` was made by this secret for ``nonce`` (constant time)."""
        if not nonce or not token:
            return False
        return hmac.compare_digest(self.token(nonce).encode(), token.encode("latin-1"))


class TrustedProxies:
    """Believe the ``X-Forwarded-*`` headers of the trusted proxies only.

    ``X-Forwarded-For`` and ``-Proto`` are uvicorn's :class:`ProxyHeadersMiddleware`'s (the
    client is the rightmost address that is not a trusted proxy); ``X-Forwarded-Host`` (its
    first value, the one the client asked for) replaces the Host header here, and
    ``X-Forwarded-Prefix`` (its first value) becomes the scope's ``root_path``, which
    :class:`~app.web.middleware.rootpath.RootPath` uses instead of ``MASKSCOPE_ROOT_PATH``.

    Args:
        app: the application.
        proxies: addresses or CIDR networks (``MASKSCOPE_TRUSTED_PROXIES``).
    """

    def __init__(self, app: ASGIApp, proxies: list[str]) -> None:
        self.networks = [ipaddress.ip_network(p, strict=False) for p in proxies]
        # uvicorn types its ASGI callables more narrowly than Starlette: the same protocol.
        self.app = cast(
            ASGIApp,
            ProxyHeadersMiddleware(app, trusted_hosts=[str(n) for n in self.networks]),  # type: ignore[arg-type]
        )

    def _trusted(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client or not self.networks:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self._trusted(scope):
            headers = Headers(scope=scope)
            prefix = headers.get("x-forwarded-prefix")
            if prefix:
                scope["root_path"] = prefix.split(",")[0].strip()
            forwarded = headers.get("x-forwarded-host")
            if forwarded:
                host = forwarded.split(",")[0].strip().encode("latin-1")
                scope["headers"] = [
                    *((k, v) for k, v in scope["headers"] if k != b"host"),
                    (b"host", host),
                ]
        await self.app(scope, receive, send)


def _content_security_policy(nonce: str) -> str:
    # Scripts are all vendored files; CodeMirror's <style> elements carry the nonce; style
    # attributes stay allowed (CodeMirror sets `style="tab-size: 4"` on its content, the
    # inspector draws bars by width) since they cannot run code.
    return (
        "default-src 'self'; script-src 'self'; "
        f"style-src 'self' 'nonce-{nonce}'; style-src-attr 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


class SecurityGate:
    """The Host, Origin and CSRF checks (403 ``forbidden_origin``) and the security headers.

    A state-changing request (POST, PUT, PATCH, DELETE) is refused when it says it comes from
    another site (an ``Origin`` whose scheme, host or port is not this server's, as a trusted
    proxy's ``X-Forwarded-Proto`` and ``-Host`` name it; ``Sec-Fetch-Site: cross-site``), and when a
    browser could have sent it cross-site without a preflight (a form-encoded, multipart or
    text/plain body, or any ``/ui/`` route: the page's) without the page's CSRF token. A JSON
    API call without an ``Origin`` (curl, SDKs, the CLI) needs no token.

    Args:
        app: the application.
        hosts: the allowed host names (see :func:`allowed_hosts`).
        signer: checks the CSRF tokens.
    """

    def __init__(self, app: ASGIApp, hosts: frozenset[str], signer: CsrfSigner) -> None:
        self.app = app
        self.hosts = hosts
        self.signer = signer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        nonce = request.cookies.get(CSRF_COOKIE)
        fresh = not nonce
        nonce = nonce or self.signer.new_nonce()
        csp_nonce = secrets.token_urlsafe(16)
        state = scope.setdefault("state", {})
        state["csrf_token"] = self.signer.token(nonce)
        state["csp_nonce"] = csp_nonce
        send = self._with_headers(send, csp_nonce, nonce if fresh else None, scope["scheme"])
        refusal = self._refusal(request, None if fresh else nonce)
        if refusal is not None:
            log.warning("%s %s refused: %s", request.method, scope["path"], refusal.message)
            response = error_response(request, status_of(refusal), refusal.to_dict())
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, request: Request, nonce: str | None) -> ForbiddenOrigin | None:
        path = route_path(request.scope)
        host = host_name(request.headers.get("host", ""))
        if host not in self.hosts and path not in _PROBES:
            return ForbiddenOrigin(
                f"this server does not answer to the host {host or '(none)'!r} (a DNS "
                f"rebinding defence): add it to MASKSCOPE_ALLOWED_HOSTS"
            )
        if request.method not in _UNSAFE:
            return None
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin is not None and not self._same_origin(own, origin):
            return ForbiddenOrigin(
                f"a {request.method} from the origin {origin!r} is refused: only this server's "
                f"own pages ({own}, scheme and port included) may change its state; behind a "
                f"reverse proxy, list it in MASKSCOPE_TRUSTED_PROXIES"
            )
        if request.headers.get("sec-fetch-site") == "cross-site":
            return ForbiddenOrigin(f"a cross-site {request.method} is refused (Sec-Fetch-Site)")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        needs_token = path.startswith("/ui/") or media in _SIMPLE_TYPES
        if needs_token and not self.signer.verify(nonce, request.headers.get(CSRF_HEADER)):
            return ForbiddenOrigin(
                f"this {request.method} needs the page's CSRF token (the {CSRF_HEADER} header "
                f"and the page's cookie): reload the page; API clients send JSON"
            )
        return None

    def _same_origin(self, own_url: str, origin: str) -> bool:
        # Scheme, host and port, as a browser compares them: a page on another port of this
        # host, or served over the other scheme, is another origin. Another allowed name of
        # this server on the same scheme and port is this server's page.
        theirs, own = origin_of(origin), origin_of(own_url)
        if theirs is None or own is None:
            return False  # "null" (a sandboxed frame, a file) and anything odd
        scheme, host, port = theirs
        return theirs == own or ((scheme, port) == (own[0], own[2]) and host in self.hosts)

    def _with_headers(
        self, send: Send, csp_nonce: str, new_cookie: str | None, scheme: str
    ) -> Send:
        policy = _content_security_policy(csp_nonce).encode()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() not in _HEADER_NAMES
                ]
                headers += [
                    (b"content-security-policy", policy),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                html = dict(headers).get(b"content-type", b"").startswith(b"text/html")
                if new_cookie is not None and html:
                    # Lax, not Strict: a permalink opened from another site must keep the
                    # cookie that the other open tabs' tokens were made for.
                    secure = "; Secure" if scheme == "https" else ""
                    cookie = f"{CSRF_COOKIE}={new_cookie}; Path=/; HttpOnly; SameSite=Lax{secure}"
                    headers.append((b"set-cookie", cookie.encode()))
                message["headers"] = headers
            await send(message)

        return send_with_headers


_HEADER_NAMES = frozenset(
    {b"content-security-policy", b"x-frame-options", b"x-content-type-options", b"referrer-policy"}
)
