"""The path the app is served under (``MASKSCOPE_ROOT_PATH``, a trusted proxy's prefix).

Behind a reverse proxy that mounts Maskscope at ``/maskscope/``, every URL the server writes (a
link, an asset, an HTMX request, the SSE stream, a permalink) must start with ``/maskscope``.
:class:`RootPath` makes each request's scope say so the ASGI way (``root_path`` is the prefix,
``path`` the whole path, prefix included, whether the proxy strips it or not) and keeps the
prefix in a context variable for the request, read by :func:`url` (a Jinja global) and by the
use cases that write a URL; the page's scripts read it from ``<meta name="root-path">``.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import ROOT_PATH

__all__ = ["RootPath", "current_root_path", "route_path", "url"]

_ROOT: ContextVar[str] = ContextVar("maskscope_root_path", default="")


def current_root_path() -> str:
    """The prefix of the current request (``""`` at ``/``, else ``/maskscope``: no slash at
    the end)."""
    return _ROOT.get()


def url(path: str) -> str:
    """``path`` (absolute, from the app's root: ``/static/app.css``) as the client must ask
    for it: under the current request's root path."""
    return current_root_path() + path


def route_path(scope: Scope) -> str:
    """The request's path inside the app (without the root path): what routes match."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        return path[len(root) :]
    return path


class RootPath:
    """Serve the app under ``root_path`` (or the prefix a trusted proxy sent, already in
    ``scope["root_path"]``: :class:`~app.web.middleware.security.TrustedProxies`).

    A proxy that strips the prefix (nginx ``proxy_pass http://up/;``) and one that keeps it both
    work: the scope's path gets the prefix when it lacks it, as ASGI wants.

    Args:
        app: the application.
        root_path: ``MASKSCOPE_ROOT_PATH`` (validated: ``""`` or ``/a/b``).
    """

    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = str(scope.get("root_path") or "").rstrip("/")
        root = given if ROOT_PATH.fullmatch(given) else self.root_path
        scope["root_path"] = root
        path: str = scope["path"]
        if root and not path.startswith(root + "/"):
            # ``/maskscope`` itself is the page at ``/maskscope/``.
            rest = "/" if path == root else path
            scope["path"] = root + rest
            raw = scope.get("raw_path")
            if raw is not None:
                raw = b"/" if raw == root.encode("ascii") else raw
                scope["raw_path"] = root.encode("ascii") + raw
        token = _ROOT.set(root)
        try:
            await self.app(scope, receive, send)
        finally:
            _ROOT.reset(token)
