"""The app factory."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app import __version__
from app.engine import Engine
from app.settings import Settings
from app.web import middleware
from app.web.errors import FORBIDDEN_RESPONSE, install_error_handlers
from app.web.routes import compile as compile_routes
from app.web.routes import (
    doctor,
    examples,
    health,
    instruments,
    metrics,
    models,
    permalinks,
    replay,
    roundtrip,
    sessions,
    stacks,
    suites,
    tests,
    tool_formats,
)
from app.web.routes import export as export_routes
from app.web.runtime.lifespan import lifespan
from app.web.runtime.state import STATIC_DIR, AppState
from app.web.ui import export as export_dialog
from app.web.ui import page, panels, render, session
from app.web.ui import suites as suite_view
from app.web.ui import tests as tests_panel

__all__ = ["create_app"]

#: The JSON API's routers, then the page's.
ROUTERS = (
    health.router,
    metrics.router,
    models.router,
    compile_routes.router,
    sessions.router,
    instruments.router,
    permalinks.router,
    replay.router,
    roundtrip.router,
    examples.router,
    export_routes.router,
    doctor.router,
    tests.router,
    tool_formats.router,
    stacks.router,
    suites.router,
    export_dialog.router,
    tests_panel.router,
    suite_view.router,
    page.router,
    session.router,
    panels.router,
)


def create_app(settings: Settings | None = None, *, engine: Engine | None = None) -> FastAPI:
    """Build the Maskscope app.

    Args:
        settings: configuration; read from the environment when omitted.
        engine: an already loaded engine to share (tests); when omitted the app loads one at
            startup, in the background, so ``/healthz`` answers at once and ``/readyz`` says 503
            until the model is ready.
    """
    state = AppState(settings or Settings(), engine)
    render.install(state.templates.env)
    app = FastAPI(
        title="Maskscope",
        version=__version__,
        description="See what xgrammar's token mask allows and blocks, step by step.",
        lifespan=lifespan(state),
        responses=FORBIDDEN_RESPONSE,
    )
    app.state.maskscope = state
    install_error_handlers(app)
    middleware.install(app, state.settings)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
