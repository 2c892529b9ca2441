"""A session's run flags, owned by one object: which run is current, whether a pause was asked,
whether a run loop is streaming, whether the last run is over."""

from __future__ import annotations

__all__ = ["RunState"]


class RunState:
    """The run flags of one session; every other module asks it rather than writing a flag.

    A run is one stream's loop of steps. A newer stream takes the run over (``start``), and the
    older loop, seeing ``current`` false for its run, stops. A pause asked while a run streams
    stops it after the step in flight; a run that ended (paused or done) and said so is over, so
    a reconnect to it gets the rest of its events but never generates again.
    """

    def __init__(self) -> None:
        self._run = 0
        self._pause = False
        self._streaming = False
        self._over = False

    @property
    def streaming(self) -> bool:
        """Whether a run loop is active."""
        return self._streaming

    @property
    def paused(self) -> bool:
        """Whether a pause was asked of the current run."""
        return self._pause

    @property
    def over(self) -> bool:
        """Whether the last run ended and said so."""
        return self._over

    def start(self, *, resume: bool = False) -> int:
        """Start (or, with ``resume``, continue) a run, taking it over from any older loop.

        Args:
            resume: a reconnect continuing the run it lost: a pause asked, or the run being
                over, still holds.

        Returns:
            The run's number, for ``current`` and ``finish``.
        """
        self._run += 1
        if not resume:
            self._pause = self._over = False
        self._streaming = True
        return self._run

    def current(self, run: int) -> bool:
        """Whether ``run`` is still the session's current run (no newer stream took over)."""
        return self._run == run

    def generating(self, run: int) -> bool:
        """Whether ``run`` should take another step: current, not paused and not over."""
        return self.current(run) and not (self._pause or self._over)

    def pause(self) -> None:
        """Ask the streaming run to stop after the step in flight (nothing when none streams)."""
        self._pause = self._streaming

    def end(self, run: int) -> None:
        """Mark ``run`` over: it said ``done`` or ``paused``, and never generates again."""
        if self.current(run):
            self._over = True

    def finish(self, run: int) -> None:
        """The loop of ``run`` has left: it streams no more (unless a newer run took over)."""
        if self.current(run):
            self._streaming = False
