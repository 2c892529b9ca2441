"""The app's life: the engine loaded in the background, idle sessions swept, then the stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from app.web.runtime.state import AppState, release_memory
from app.web.runtime.warmup import warm_up

__all__ = ["lifespan"]


async def _sweep(state: AppState) -> None:
    # Expire idle sessions even when no request comes to trigger it, and give their memory
    # back to the system (KV caches grow by small reallocations that malloc keeps otherwise).
    while True:
        await asyncio.sleep(min(state.settings.session_ttl_s / 2, 30.0))
        if state.sessions.expire():
            await asyncio.to_thread(release_memory)


def _load_then_warm(state: AppState) -> None:
    """The model, then (unless ``warm_up`` is off) what would load on its first use."""
    state.load()
    if state.settings.warm_up and not state.shutdown.started:
        warm_up(state)


def lifespan(state: AppState) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan over ``state``: it loads the engine (unless given one), probes the
    sandbox, sweeps idle sessions, and on the way out stops the Doctor first, then the rest."""

    @asynccontextmanager
    async def run(_: FastAPI) -> AsyncIterator[None]:
        loading = None
        if state.engine is None:
            loading = asyncio.get_running_loop().run_in_executor(None, _load_then_warm, state)
        else:
            state.remotes.start(state.engine)
        # The sandbox's containment level, probed once now and logged (``/readyz`` reports it).
        probing = asyncio.create_task(asyncio.to_thread(lambda: state.sandbox.level))
        sweeper = asyncio.create_task(_sweep(state))
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

    return run
