"""How far a permalink's live session is rebuilt: the steps its trace has replayed so far, for
the page's determinate progress bar while the recorded chips are shown (issue 45, M5).

The page names its rebuild with a token of its own (the open request's ``rebuild`` field) and
asks for the progress by that token while the open request runs, and a while after: the answer
can reach the page well after the rebuild ends (a busy server, a slow link), and the page's polls
meanwhile see the final count, not a bar left where its last poll during the rebuild found it.
The session being rebuilt is
the one :func:`app.web.services.actions.create_session` registers inside :func:`tracked`: it
tells :func:`attach`, through a context variable (the open request's own task), so nothing in
the rebuild itself changes.
"""

from __future__ import annotations

import contextlib
import re
import time
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState

__all__ = ["Rebuild", "attach", "progress", "tracked"]

#: A page's rebuild token: URL-safe, short.
TOKEN = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
#: How long an ended rebuild's final count is still answered.
KEPT_S = 60.0


@dataclass
class Rebuild:
    """One rebuild under way: the trace's step count, and the session once registered."""

    total: int
    handle: SessionHandle | None = None
    #: The final count and when it was reached, once the rebuild has ended.
    final: int | None = None
    ended: float = 0.0

    def done(self) -> int:
        """The steps replayed so far (0 until the session is registered)."""
        if self.final is not None:
            return self.final
        return 0 if self.handle is None else min(len(self.handle.session.steps), self.total)

    def end(self) -> None:
        """Keep the count reached, not the session (which is the open request's now)."""
        self.final, self.ended, self.handle = self.done(), time.monotonic(), None


_CURRENT: ContextVar[Rebuild | None] = ContextVar("rebuild", default=None)
_UNDER_WAY: weakref.WeakKeyDictionary[AppState, dict[str, Rebuild]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def tracked(state: AppState, token: str | None, total: int) -> Iterator[Rebuild]:
    """The rebuild of a permalink's session, known by ``token`` while the block runs (not
    known at all without a valid token)."""
    rebuild = Rebuild(total)
    known = _UNDER_WAY.setdefault(state, {})
    _forget_ended(known)
    named = bool(token and TOKEN.match(token))
    if named:
        assert token is not None
        known[token] = rebuild
    reset = _CURRENT.set(rebuild)
    try:
        yield rebuild
    finally:
        _CURRENT.reset(reset)
        rebuild.end()


def attach(handle: SessionHandle) -> None:
    """Called where a session is registered: inside :func:`tracked`, it is the one rebuilt."""
    rebuild = _CURRENT.get()
    if rebuild is not None and rebuild.handle is None:
        rebuild.handle = handle


def progress(state: AppState, token: str) -> tuple[int, int] | None:
    """``(done, total)`` of the rebuild ``token`` names (under way, or ended less than
    :data:`KEPT_S` ago), or None when there is none."""
    known = _UNDER_WAY.get(state, {})
    _forget_ended(known)
    rebuild = known.get(token)
    return None if rebuild is None else (rebuild.done(), rebuild.total)


def _forget_ended(known: dict[str, Rebuild]) -> None:
    since = time.monotonic() - KEPT_S
    for token in [t for t, r in known.items() if r.final is not None and r.ended < since]:
        del known[token]
