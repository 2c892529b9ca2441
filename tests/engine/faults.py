"""Fault injection through the session's constructor: forward and masking engines that wrap the
real ones and fail (or lie) where a test says, instead of patching a session's private parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from app.engine.masking.base import MaskingEngine
from app.engine.model.forward.base import ForwardEngine, RawDistribution
from app.engine.model.sampling import SamplingParams

__all__ = ["BrokenRollback", "Fault", "FaultyForward", "FaultyMasking", "Injected", "flip_bit"]

T = TypeVar("T")


class Injected(RuntimeError):
    """The failure the tests inject."""


class Fault:
    """Raise :class:`Injected` once, from the method named ``method``, when ``when()`` holds.

    Args:
        method: the wrapped engine's method to fail.
        when: asked at each call of that method; the first call for which it holds fails.
        after_real_call: make the real call first (its effect then has to be undone).
    """

    def __init__(
        self, method: str, *, when: Callable[[], bool], after_real_call: bool = False
    ) -> None:
        self.method = method
        self.when = when
        self.after_real_call = after_real_call
        self.fired = False

    def call(self, method: str, real: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``real(*args, **kwargs)``, unless this is the call that fails."""
        if self.fired or method != self.method or not self.when():
            return real(*args, **kwargs)
        self.fired = True
        if self.after_real_call:
            real(*args, **kwargs)
        raise Injected(f"injected into {method}")


def _no_fault() -> Fault:
    return Fault("", when=lambda: False)


class FaultyForward:
    """A forward engine that is ``inner`` but for ``fault``."""

    def __init__(self, inner: ForwardEngine, fault: Fault) -> None:
        self.inner = inner
        self.fault = fault

    def distribution(self) -> RawDistribution:
        """``inner``'s :meth:`ForwardEngine.distribution`, but for the fault."""
        return self.fault.call("distribution", self.inner.distribution)

    def choose(
        self, raw: RawDistribution, bitmask: torch.Tensor, sampling: SamplingParams, *, index: int
    ) -> int:
        """``inner``'s :meth:`ForwardEngine.choose`, but for the fault."""
        return self.fault.call("choose", self.inner.choose, raw, bitmask, sampling, index=index)

    def with_token(self, raw: RawDistribution, token_id: int) -> RawDistribution:
        """``inner``'s :meth:`ForwardEngine.with_token`, but for the fault."""
        return self.fault.call("with_token", self.inner.with_token, raw, token_id)

    def extend(self, token_id: int) -> None:
        """``inner``'s :meth:`ForwardEngine.extend`, but for the fault."""
        self.fault.call("extend", self.inner.extend, token_id)

    def truncate(self, generated: int) -> None:
        """``inner``'s :meth:`ForwardEngine.truncate`, but for the fault."""
        self.fault.call("truncate", self.inner.truncate, generated)

    @property
    def memory_bytes(self) -> int:
        """``inner``'s :meth:`ForwardEngine.memory_bytes`, but for the fault."""
        return self.inner.memory_bytes


class FaultyMasking:
    """A masking engine that is ``inner`` but for ``fault``, and ``after_fill``, which may
    rewrite each mask it fills (a lying mask): it is called with the mask and the number of
    tokens the matcher holds (the step whose mask it is, drafts aside).

    Args:
        held: the tokens ``inner`` holds already (a copy's).
    """

    def __init__(
        self,
        inner: MaskingEngine,
        fault: Fault | None = None,
        *,
        after_fill: Callable[[torch.Tensor, int], None] | None = None,
        held: int = 0,
    ) -> None:
        self.inner = inner
        self.fault = fault or _no_fault()
        self.after_fill = after_fill
        self.name = inner.name
        self.held = held

    def fill_next_token_bitmask(self, bitmask: torch.Tensor) -> None:
        """``inner``'s :meth:`MaskingEngine.fill_next_token_bitmask`, but for the fault."""
        self.fault.call("fill_next_token_bitmask", self.inner.fill_next_token_bitmask, bitmask)
        if self.after_fill is not None:
            self.after_fill(bitmask, self.held)

    def accept_token(self, token_id: int) -> bool:
        """``inner``'s :meth:`MaskingEngine.accept_token`, but for the fault."""
        accepted = self.fault.call("accept_token", self.inner.accept_token, token_id)
        self.held += accepted
        return accepted

    def probe_token(self, token_id: int) -> bool:
        """``inner``'s :meth:`MaskingEngine.probe_token`, but for the fault."""
        return self.fault.call("probe_token", self.inner.probe_token, token_id)

    def accepts_bytes(self, data: bytes) -> bool:
        """``inner``'s :meth:`MaskingEngine.accepts_bytes`, but for the fault."""
        return self.fault.call("accepts_bytes", self.inner.accepts_bytes, data)

    def accept_bytes(self, data: bytes) -> int:
        """``inner``'s :meth:`MaskingEngine.accept_bytes`, but for the fault."""
        return self.fault.call("accept_bytes", self.inner.accept_bytes, data)

    def rollback(self, n: int) -> None:
        """``inner``'s :meth:`MaskingEngine.rollback`, but for the fault."""
        self.fault.call("rollback", self.inner.rollback, n)
        self.held -= n

    def find_jump_forward_string(self) -> str:
        """``inner``'s :meth:`MaskingEngine.find_jump_forward_string`, but for the fault."""
        return self.fault.call("find_jump_forward_string", self.inner.find_jump_forward_string)

    def is_terminated(self) -> bool:
        """``inner``'s :meth:`MaskingEngine.is_terminated`, but for the fault."""
        return self.fault.call("is_terminated", self.inner.is_terminated)

    def is_completed(self) -> bool:
        """``inner``'s :meth:`MaskingEngine.is_completed`, but for the fault."""
        return self.fault.call("is_completed", self.inner.is_completed)

    def active_rules(self) -> list[str]:
        """``inner``'s :meth:`MaskingEngine.active_rules`, but for the fault."""
        return self.fault.call("active_rules", self.inner.active_rules)

    def fork(self) -> FaultyMasking:
        """A copy of ``inner`` under the same fault (the checks run on copies)."""
        copy = self.fault.call("fork", self.inner.fork)
        return FaultyMasking(copy, self.fault, after_fill=self.after_fill, held=self.held)


class BrokenRollback(FaultyMasking):
    """A masking engine whose rollback is broken on purpose: ``rollback(n)`` undoes one token
    fewer than asked (the state it leaves is the one after the first of those tokens), as a
    rollback that corrupts its state would. Everything else, copies included, is ``inner``'s.

    Args:
        inner: the real engine.
        broken: whether rollback is broken now (a test may mend it).
    """

    def __init__(
        self, inner: MaskingEngine, *, broken: Callable[[], bool] = lambda: True, held: int = 0
    ) -> None:
        super().__init__(inner, held=held)
        self.broken = broken
        self.broken_rollbacks = 0

    def rollback(self, n: int) -> None:
        """``inner.rollback(n - 1)`` while broken, else ``inner.rollback(n)``."""
        self.held -= n
        if n and self.broken():
            self.broken_rollbacks += 1
            n -= 1
        self.inner.rollback(n)

    def fork(self) -> BrokenRollback:
        """A copy of ``inner`` with the same broken rollback."""
        return BrokenRollback(self.inner.fork(), broken=self.broken, held=self.held)


def flip_bit(bitmask: torch.Tensor, token_id: int) -> None:
    """Flip ``token_id``'s bit in row 0 of a packed int32 bitmask, in place."""
    word = int(bitmask[0, token_id >> 5]) ^ (1 << (token_id & 31))
    bitmask[0, token_id >> 5] = word - (1 << 32) if word >= 1 << 31 else word
