"""How far a permalink's live session is rebuilt: the steps its trace has replayed so far, for
the page's determinate progress bar while the recorded chips are shown (issue 45, M5).

The page names its rebuild with a token of its own (the open request's ``rebuild`` field) and
asks for the progress by that token while the open request runs. The session being rebuilt is
the one :func:`app.web.services.actions.create_session` registers inside :func:`tracked`: it
tells :func:`attach`, through a context variable (the open request's own task), so nothing in
the rebuild itself changes.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState

__all__ = ["Rebuild", "attach", "progress", "tracked"]

#: A page's rebuild token: URL-safe, short.
TOKEN = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


@dataclass
class Rebuild:
    """One rebuild under way: the trace's step count, and the session once registered."""

    total: int
    handle: SessionHandle | None = None

    def done(self) -> int:
        """The steps replayed so far (0 until the session is registered)."""
        return 0 if self.handle is None else min(len(self.handle.session.steps), self.total)


_CURRENT: ContextVar[Rebuild | None] = ContextVar("rebuild", default=None)
_UNDER_WAY: weakref.WeakKeyDictionary[AppState, dict[str, Rebuild]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def tracked(state: AppState, token: str | None, total: int) -> Iterator[Rebuild]:
    """The rebuild of a permalink's session, known by ``token`` while the block runs (not
    known at all without a valid token)."""
    rebuild = Rebuild(total)
    known = _UNDER_WAY.setdefault(state, {})
    named = bool(token and TOKEN.match(token))
    if named:
        assert token is not None
        known[token] = rebuild
    reset = _CURRENT.set(rebuild)
    try:
        yield rebuild
    finally:
        _CURRENT.reset(reset)
        if named and known.get(token or "") is rebuild:
            del known[token or ""]


def attach(handle: SessionHandle) -> None:
    """Called where a session is registered: inside :func:`tracked`, it is the one rebuilt."""
    rebuild = _CURRENT.get()
    if rebuild is not None and rebuild.handle is None:
        rebuild.handle = handle


def progress(state: AppState, token: str) -> tuple[int, int] | None:
    """``(done, total)`` of the rebuild ``token`` names, or None when none is under way."""
    rebuild = _UNDER_WAY.get(state, {}).get(token)
    return None if rebuild is None else (rebuild.done(), rebuild.total)
