"""The app factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app import __version__
from app.engine import Engine
from app.settings import Settings
from app.web.clients import ClientIdentity
from app.web.departure import ClientDeparture
from app.web.errors import FORBIDDEN_RESPONSE, install_error_handlers
from app.web.limits import BodyLimit
from app.web.requestlog import RequestLog
from app.web.rootpath import RootPath
from app.web.routes import compile as compile_routes
from app.web.routes import (
    doctor,
    examples,
    health,
    metrics,
    models,
    permalinks,
    replay,
    sessions,
    tests,
    tool_formats,
)
from app.web.routes import export as export_routes
from app.web.security import (
    CsrfSigner,
    SecurityGate,
    TrustedProxies,
    allowed_hosts,
    load_secret,
)
from app.web.state import STATIC_DIR, AppState, release_memory
from app.web.ui import export as export_dialog
from app.web.ui import page, panels, session
from app.web.ui import tests as tests_panel

__all__ = ["create_app"]


def create_app(settings: Settings | None = None, *, engine: Engine | None = None) -> FastAPI:
    """Build the Maskscope app.

    Args:
        settings: configuration; read from the environment when omitted.
        engine: an already loaded engine to share (tests); when omitted the app loads one at
            startup, in the background, so ``/healthz`` answers at once and ``/readyz`` says 503
            until the model is ready.
    """
    state = AppState(settings or Settings(), engine)

    async def sweep() -> None:
        # Expire idle sessions even when no request comes to trigger it, and give their memory
        # back to the system (KV caches grow by small reallocations that malloc keeps otherwise).
        while True:
            await asyncio.sleep(min(state.settings.session_ttl_s / 2, 30.0))
            if state.sessions.expire():
                await asyncio.to_thread(release_memory)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loading = None
        if state.engine is None:
            loading = asyncio.get_running_loop().run_in_executor(None, state.load)
        else:
            state.remotes.start(state.engine)
        # The sandbox's containment level, probed once now and logged (``/readyz`` reports it).
        probing = asyncio.create_task(asyncio.to_thread(lambda: state.sandbox.level))
        sweeper = asyncio.create_task(sweep())
        yield
        # Begun already by a SIGTERM to `python -m app serve`; not by other servers' stops.
        state.shutdown.begin()
        # First, and at once: a Doctor examination running must not hold the shutdown up.
        state.pools.doctor_workers.close()
        sweeper.cancel()
        await probing
        if loading is not None:
            await loading
        state.close()

    app = FastAPI(
        title="Maskscope",
        version=__version__,
        description="See what xgrammar's token mask allows and blocks, step by step.",
        lifespan=lifespan,
        responses=FORBIDDEN_RESPONSE,
    )
    app.state.maskscope = state
    install_error_handlers(app)
    settings = state.settings
    # Outermost last: the log sees every answer, the proxies' headers are read before the
    # Host check, and a refused request never reaches the body limit or a route. The client's
    # identity (fair shares) is innermost: it reads the address the proxies' headers gave; a
    # client's departure stops the work its request started (uvicorn cancels no handler).
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
    for router in (
        health.router,
        metrics.router,
        models.router,
        compile_routes.router,
        sessions.router,
        permalinks.router,
        replay.router,
        examples.router,
        export_routes.router,
        doctor.router,
        tests.router,
        tool_formats.router,
    ):
        app.include_router(router)
    for router in (
        export_dialog.router,
        tests_panel.router,
        page.router,
        session.router,
        panels.router,
    ):
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
