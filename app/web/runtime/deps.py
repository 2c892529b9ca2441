"""Dependencies, declared once; all async, so they run on the event loop, never in a thread."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.engine import Engine
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState

__all__ = ["EngineDep", "HandleDep", "StateDep"]


async def get_state(request: Request) -> AppState:
    """The app's state."""
    state: AppState = request.app.state.maskscope
    return state


StateDep = Annotated[AppState, Depends(get_state)]


async def get_engine(state: StateDep) -> Engine:
    """The loaded engine; 503 ``not_ready`` while it loads."""
    return state.require_engine()


EngineDep = Annotated[Engine, Depends(get_engine)]


async def get_handle(session_id: str, state: StateDep) -> SessionHandle:
    """The live session named in the path."""
    return state.sessions.get(session_id)


HandleDep = Annotated[SessionHandle, Depends(get_handle)]
