"""The ASGI middleware: client identity, departure, security, body limits, the request log, the
root path; :func:`install` puts them on an app in their one order."""

from __future__ import annotations

from fastapi import FastAPI

from app.settings import Settings
from app.web.middleware.clients import ClientIdentity
from app.web.middleware.departure import ClientDeparture
from app.web.middleware.limits import BodyLimit
from app.web.middleware.requestlog import RequestLog
from app.web.middleware.rootpath import RootPath
from app.web.middleware.security import (
    CsrfSigner,
    SecurityGate,
    TrustedProxies,
    allowed_hosts,
    load_secret,
)

__all__ = ["install"]


def install(app: FastAPI, settings: Settings) -> None:
    """Add every middleware to ``app``, and its CSRF signer to ``app.state.csrf_signer``.

    Outermost last: the log sees every answer, the proxies' headers are read before the Host
    check, and a refused request never reaches the body limit or a route. The client's identity
    (fair shares) is innermost: it reads the address the proxies' headers gave; a client's
    departure stops the work its request started (uvicorn cancels no handler).
    """
    app.add_middleware(ClientIdentity)
    app.add_middleware(ClientDeparture)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    signer = CsrfSigner(load_secret(settings))
    app.add_middleware(SecurityGate, hosts=allowed_hosts(settings), signer=signer)
    app.state.csrf_signer = signer
    # Inside the proxies' middleware: their X-Forwarded-Prefix comes first.
    app.add_middleware(RootPath, root_path=settings.root_path)
    app.add_middleware(TrustedProxies, proxies=settings.trusted_proxies)
    app.add_middleware(RequestLog)
