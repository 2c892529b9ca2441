"""``python -m app serve``: serve the playground."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from app.settings import Settings

if TYPE_CHECKING:
    import uvicorn

__all__ = [
    "EXIT_DEADLINE_S",
    "GRACE_S",
    "HELP",
    "NAME",
    "add_arguments",
    "hosts_warning",
    "run",
    "url_host",
]

NAME = "serve"
HELP = "serve the playground"

#: After SIGTERM, how long uvicorn waits for the open connections (streams end within
#: app.web.services.streams.SHUTDOWN_GRACE_S) before it cancels them and shuts the app down.
GRACE_S = 5
#: After SIGTERM, the process is gone within this long, whatever still runs (a thread cannot be
#: stopped): permalinks are committed before they are acknowledged, so nothing is lost.
EXIT_DEADLINE_S = 9.5

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``serve``'s flags."""
    parser.add_argument("--host", help="address to bind (default 127.0.0.1, MASKSCOPE_HOST)")
    parser.add_argument("--port", type=int, help="port to bind (default 8000, MASKSCOPE_PORT)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until stopped, on ``--host``/``--port`` or the settings' address."""
    import uvicorn

    from app.main import create_app

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, port = args.host or settings.host, args.port or settings.port
    # The address bound is one of the hosts answered to by default (app/web/middleware/security.py).
    settings = settings.model_copy(update={"host": host, "port": port})
    root = settings.root_path  # behind a proxy, it is also what the proxy serves it under
    print(f"Maskscope is starting: open http://{url_host(host)}:{port}{root}/", flush=True)
    warning = hosts_warning(settings)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    # Our own access log carries request ids; uvicorn's would repeat every line without them.
    # proxy_headers=False: uvicorn would believe X-Forwarded-For from loopback; the app believes
    # MASKSCOPE_TRUSTED_PROXIES only.
    from app.web.runtime.stopping import kill_workers

    app = create_app(settings)
    stop = app.state.maskscope.shutdown
    # This process is the server's own: its sandbox children are all this app's.
    stop.add_hook("sandbox processes", kill_workers)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="info", access_log=False, proxy_headers=False,
        timeout_graceful_shutdown=GRACE_S,
    )  # fmt: skip
    server = _stopping_server(config, stop.begin)
    server.run()
    return 0


def _stopping_server(config: uvicorn.Config, on_stop: Callable[[], None]) -> uvicorn.Server:
    """A uvicorn server that, on SIGTERM or SIGINT, also starts the app's stop (streams end,
    work is cancelled) and a watchdog that ends the process after :data:`EXIT_DEADLINE_S`."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not self.should_exit:
                # Not here: a signal handler may interrupt a thread holding a lock the stop
                # takes (a pool's).
                threading.Thread(target=on_stop, name="maskscope-stop", daemon=True).start()
                threading.Thread(target=_watchdog, name="maskscope-watchdog", daemon=True).start()
            super().handle_exit(sig, frame)

    return StoppingServer(config)


def _watchdog() -> None:
    """End the process if it is still there :data:`EXIT_DEADLINE_S` after the signal."""
    threading.Event().wait(EXIT_DEADLINE_S)
    running = sorted(t.name for t in threading.enumerate() if t.is_alive() and not t.daemon)
    log.error("still stopping after %.1f s (threads: %s): exiting now", EXIT_DEADLINE_S, running)
    logging.shutdown()
    os._exit(1)


def url_host(host: str) -> str:
    """``host`` as written in a URL: a wildcard address as ``localhost``, IPv6 in brackets."""
    from app.web.middleware.security import is_wildcard

    if is_wildcard(host):
        return "localhost"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def hosts_warning(settings: Settings) -> str | None:
    """What the operator must do when every address is bound but no host is named."""
    from app.web.middleware.security import is_wildcard

    if settings.allowed_hosts is not None or not is_wildcard(settings.host):
        return None
    return (
        f"warning: --host {settings.host} listens on every address, but MASKSCOPE_ALLOWED_HOSTS "
        "is not set: only localhost, 127.0.0.1 and [::1] are answered (other Host headers get "
        "403 forbidden_origin, a DNS rebinding defence). Set MASKSCOPE_ALLOWED_HOSTS to the "
        "names clients use, e.g. MASKSCOPE_ALLOWED_HOSTS=maskscope.example,10.0.0.5"
    )
