"""``python -m app serve``: serve the playground."""

from __future__ import annotations

import argparse
import sys

from app.settings import Settings

__all__ = ["HELP", "NAME", "add_arguments", "hosts_warning", "run", "url_host"]

NAME = "serve"
HELP = "serve the playground"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``serve``'s flags."""
    parser.add_argument("--host", help="address to bind (default 127.0.0.1, MASKSCOPE_HOST)")
    parser.add_argument("--port", type=int, help="port to bind (default 8000, MASKSCOPE_PORT)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until stopped, on ``--host``/``--port`` or the settings' address."""
    import logging

    import uvicorn

    from app.main import create_app

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, port = args.host or settings.host, args.port or settings.port
    # The address bound is one of the hosts answered to by default (app/web/security.py).
    settings = settings.model_copy(update={"host": host, "port": port})
    print(f"Maskscope is starting: open http://{url_host(host)}:{port}/", flush=True)
    warning = hosts_warning(settings)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    # Our own access log carries request ids; uvicorn's would repeat every line without them.
    # proxy_headers=False: uvicorn would believe X-Forwarded-For from loopback; the app believes
    # MASKSCOPE_TRUSTED_PROXIES only.
    uvicorn.run(
        create_app(settings), host=host, port=port, log_level="info", access_log=False,
        proxy_headers=False,
    )  # fmt: skip
    return 0


def url_host(host: str) -> str:
    """``host`` as written in a URL: a wildcard address as ``localhost``, IPv6 in brackets."""
    from app.web.security import is_wildcard

    if is_wildcard(host):
        return "localhost"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def hosts_warning(settings: Settings) -> str | None:
    """What the operator must do when every address is bound but no host is named."""
    from app.web.security import is_wildcard

    if settings.allowed_hosts is not None or not is_wildcard(settings.host):
        return None
    return (
        f"warning: --host {settings.host} listens on every address, but MASKSCOPE_ALLOWED_HOSTS "
        "is not set: only localhost, 127.0.0.1 and [::1] are answered (other Host headers get "
        "403 forbidden_origin, a DNS rebinding defence). Set MASKSCOPE_ALLOWED_HOSTS to the "
        "names clients use, e.g. MASKSCOPE_ALLOWED_HOSTS=maskscope.example,10.0.0.5"
    )
