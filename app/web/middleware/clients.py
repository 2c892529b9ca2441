"""Who a request is for: the client's network, the key that sessions, queues and quotas share
fairly by.

An ASGI middleware keeps the key of ``scope["client"]`` (``request.client.host``) in a context
variable for the rest of the request, so the pools read it without every use case passing it
along; a pool copies the context to its threads, so work done there is counted for the same
client. The key is the address's network, not the address: one IPv6 host is handed a /64 and
may use any address in it, so every address of a /64 is one client (``client_prefix_v6``), and
an IPv4 address is itself by default (``client_prefix_v4``, 32).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["UNKNOWN", "ClientIdentity", "acting_for", "client_key", "current_client"]

#: The client of work done outside a request (the CLI, start-up), or of a request without a peer.
UNKNOWN = "unknown"

#: The longest key kept for a peer that is no IP address (a Unix socket's name, a test's).
MAX_NAME = 64

_CLIENT: ContextVar[str] = ContextVar("maskscope_client", default=UNKNOWN)


def current_client() -> str:
    """The key of the client the current request (or the work it started) is for."""
    return _CLIENT.get()


@contextmanager
def acting_for(client: str) -> Iterator[None]:
    """Count the work done inside the block for ``client``."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)


def client_key(host: str, *, prefix_v4: int = 32, prefix_v6: int = 64) -> str:
    """The client an address belongs to: its network, written as an address when the prefix
    is the whole address (``203.0.113.7``) and as a network otherwise (``2001:db8:1:2::/64``).

    An IPv4 address mapped into IPv6 (``::ffff:203.0.113.7``, a dual-stack socket's) is keyed
    as IPv4. A peer that is no address keeps its name, cut to :data:`MAX_NAME` characters.

    Args:
        host: the peer's address (``scope["client"][0]``).
        prefix_v4: the prefix length of an IPv4 client's network.
        prefix_v6: the prefix length of an IPv6 client's network.
    """
    try:
        address = ipaddress.ip_address(host.strip().strip("[]").partition("%")[0])
    except ValueError:
        return host[:MAX_NAME] or UNKNOWN
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    prefix = prefix_v4 if address.version == 4 else prefix_v6
    if prefix == address.max_prefixlen:
        return str(address)
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


class ClientIdentity:
    """Set :func:`current_client` to the key of ``scope["client"]``'s host for each request.

    It reads the scope when the request reaches it: added first in ``create_app`` (innermost),
    it sees the address a trusted-proxy middleware put there from ``X-Forwarded-For``, so a
    proxied client is keyed by its network as a direct one is.

    Args:
        app: the application.
        prefixes: the prefix lengths of an IPv4 and an IPv6 client's network; None: the app's
            ``client_prefix_v4`` and ``client_prefix_v6`` settings, read at the first request
            (``scope["app"].state.maskscope.settings``).
    """

    def __init__(self, app: ASGIApp, *, prefixes: tuple[int, int] | None = None) -> None:
        self.app = app
        self.prefixes = prefixes

    def _prefixes(self, scope: Scope) -> tuple[int, int]:
        if self.prefixes is None:
            settings = scope["app"].state.maskscope.settings
            self.prefixes = (settings.client_prefix_v4, settings.client_prefix_v6)
        return self.prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = scope.get("client")
        client = UNKNOWN
        if peer:
            v4, v6 = self._prefixes(scope)
            client = client_key(str(peer[0]), prefix_v4=v4, prefix_v6=v6)
        with acting_for(client):
            await self.app(scope, receive, send)
