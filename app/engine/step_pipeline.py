"""The step's pipeline: a forward pass started on a worker thread while the caller's thread does
the rest (the next mask, the previous step's checks), and what a step prepares before its token.

Only the token's choice and acceptance (and the mask) sit between two forward passes; the
probe, the follower's comparison, the rollback check and the distribution's view of step k run
while the forward pass of step k+1 does. Torch and the masking libraries release the GIL in
their kernels, which is what lets the two threads overlap.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from app.engine.forward.base import ForwardEngine, RawDistribution
from app.engine.masking.base import MaskingEngine
from app.engine.records import DraftsRecord, GrammarState, RollbackRecord

__all__ = ["ForwardOutcome", "PendingForward", "Prepared", "forward_pool"]

#: forward passes in flight at once, over every session (each session has at most one)
FORWARD_THREADS = 32

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def forward_pool() -> ThreadPoolExecutor:
    """The worker threads that run forward passes, created on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(FORWARD_THREADS, thread_name_prefix="maskscope-forward")
        return _pool


@dataclass(frozen=True, slots=True)
class ForwardOutcome:
    """A forward pass's result (or the error it raised) and when it ran (perf_counter s)."""

    raw: RawDistribution | None
    error: BaseException | None
    start: float
    end: float

    def result(self) -> RawDistribution:
        """The distribution, or the forward pass's error raised again."""
        if self.error is not None:
            raise self.error
        assert self.raw is not None
        return self.raw


def _run(forward: ForwardEngine, started: threading.Event | None = None) -> ForwardOutcome:
    start = time.perf_counter()
    if started is not None:
        started.set()
    try:
        raw = forward.distribution()
    except BaseException as error:  # noqa: BLE001 - it belongs to the step that waits for it
        return ForwardOutcome(None, error, start, time.perf_counter())
    return ForwardOutcome(raw, None, start, time.perf_counter())


class PendingForward:
    """One forward pass, on a worker thread (``overlap``) or run at once on this one.

    Args:
        forward: the session's forward engine; nothing else may touch it until :meth:`wait`.
        overlap: run it on :func:`forward_pool`'s thread.
    """

    def __init__(self, forward: ForwardEngine, *, overlap: bool) -> None:
        self._future: Future[ForwardOutcome] | None = None
        self._done: ForwardOutcome | None = None
        if overlap:
            started = threading.Event()
            self._future = forward_pool().submit(_run, forward, started)
            # Block (releasing the GIL) until the pass has begun: else the worker may wait for
            # the GIL while this thread prepares the next mask, and the model idles meanwhile.
            started.wait()
        else:
            self._done = _run(forward)

    def wait(self) -> ForwardOutcome:
        """The outcome, once the forward pass has ended (it never raises)."""
        if self._done is None:
            assert self._future is not None
            self._done = self._future.result()
        return self._done


@dataclass(slots=True)
class Prepared:
    """What step ``index`` knows before its token is chosen, prepared while its forward pass ran.

    Attributes:
        index: the step.
        bitmask: the step's mask (its own tensor: the next step's is filled while this one's
            checks still read it).
        before: the parser state the mask was computed in.
        jump_forward: the jump-forward string in that state.
        mask_us: the mask fill's time.
        checkpoint: a copy of the matcher in that state (never advanced: the probe runs on a
            copy of it), kept for a later back's rollback check.
        drafts: the step's speculative drafts, when the session has any.
        rollback: the check of the rollback that preceded the step, if one did.
        outcome: the forward pass of the step's prefix, once it has run (None: run it).
    """

    index: int
    bitmask: torch.Tensor
    before: GrammarState
    jump_forward: str
    mask_us: float
    checkpoint: MaskingEngine
    drafts: DraftsRecord | None
    rollback: RollbackRecord | None
    outcome: ForwardOutcome | None = None
