"""The llguidance masking engine: an ``LLMatcher`` behind the :class:`MaskingEngine` seam.

Two differences from xgrammar shape this module. ``consume_token`` of a refused token puts an
``LLMatcher`` in an error state that rollback does not clear, so every question ("would it take
this token?") is asked with ``validate_tokens`` first, and a refused token is never consumed.
And llguidance stops by itself once nothing can follow ("NoExtension") and keeps allowing EOS
after EOS, so *terminated* (a stop token accepted after a complete sentence) is tracked here.
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance
import torch

from app.engine.budget import checkpoint
from app.engine.grammars.llguidance.compiler import LlguidanceGrammar, fill_bitmask
from app.engine.grammars.spec import CompileResult

__all__ = ["LlguidanceMasking"]


class LlguidanceMasking:
    """A fresh ``llguidance.LLMatcher`` for a grammar compiled by llguidance.

    Args:
        grammar: the grammar compiled by :class:`app.engine.grammars.llguidance.LlguidanceCompiler`.
        matcher: the matcher to wrap (a copy) and ``stops`` its stop flags; a fresh matcher in
            the start state by default.
    """

    name = "llguidance"

    def __init__(
        self,
        grammar: CompileResult,
        *,
        matcher: llguidance.LLMatcher | None = None,
        stops: Sequence[bool] = (),
    ) -> None:
        compiled: LlguidanceGrammar = grammar.compiled
        self._grammar = grammar
        self._matcher = matcher or compiled.matcher()
        self._tokenizer = compiled.tokenizer
        self._stop_ids = compiled.stop_ids
        # One flag per accepted token: whether it was a stop token (the matcher terminated).
        self._stops: list[bool] = list(stops)

    def fork(self) -> LlguidanceMasking:
        """See :meth:`MaskingEngine.fork`: ``LLMatcher.deep_copy()``, with the stop flags."""
        return LlguidanceMasking(
            self._grammar, matcher=self._matcher.deep_copy(), stops=self._stops
        )

    def fill_next_token_bitmask(self, bitmask: torch.Tensor) -> None:
        """See :meth:`MaskingEngine.fill_next_token_bitmask`."""
        checkpoint()
        if self.is_terminated():
            bitmask[0].zero_()
        else:
            fill_bitmask(self._matcher, bitmask)

    def accept_token(self, token_id: int) -> bool:
        """See :meth:`MaskingEngine.accept_token`."""
        checkpoint()
        if not self.probe_token(token_id):
            return False
        if not self._matcher.consume_token(token_id):  # validated: only a library fault
            raise RuntimeError(f"llguidance: {self._matcher.get_error()}")
        self._stops.append(token_id in self._stop_ids)
        return True

    def probe_token(self, token_id: int) -> bool:
        """See :meth:`MaskingEngine.probe_token`; never touches the matcher's state."""
        checkpoint()
        if self.is_terminated():
            return False
        if token_id in self._stop_ids:
            # validate_tokens answers 0 for EOS once the matcher has stopped by itself (nothing
            # can follow); llguidance's mask allows EOS exactly when the text is accepted.
            return bool(self._matcher.is_accepting())
        return bool(self._matcher.validate_tokens([token_id]) == 1)

    def accepts_bytes(self, data: bytes) -> bool:
        """See :meth:`MaskingEngine.accepts_bytes`: the bytes as llguidance tokenizes them
        (llguidance lexes bytes, so any tokenization of them answers alike)."""
        checkpoint()
        if self.is_terminated():
            return False
        ids = self._tokenizer.tokenize_bytes(data)
        return bool(self._matcher.validate_tokens(ids) == len(ids))

    def accept_bytes(self, data: bytes) -> int:
        """See :meth:`MaskingEngine.accept_bytes`: the bytes as llguidance tokenizes them, one
        rollback step per token."""
        checkpoint()
        if self.is_terminated():
            return 0
        ids = self._tokenizer.tokenize_bytes(data)
        if self._matcher.validate_tokens(ids) != len(ids):
            return 0
        if not self._matcher.consume_tokens(ids):  # validated: only a library fault
            raise RuntimeError(f"llguidance: {self._matcher.get_error()}")
        self._stops.extend(token_id in self._stop_ids for token_id in ids)
        return len(ids)

    def rollback(self, n: int) -> None:
        """See :meth:`MaskingEngine.rollback`."""
        if n:
            if not self._matcher.rollback(n):
                raise RuntimeError(f"llguidance: {self._matcher.get_error()}")
            del self._stops[-n:]

    def find_jump_forward_string(self) -> str:
        """See :meth:`MaskingEngine.find_jump_forward_string`: llguidance's fast-forward bytes
        (what the grammar forces next), as text."""
        checkpoint()
        if self.is_terminated():
            return ""
        return self._matcher.compute_ff_bytes().decode("utf-8", errors="replace")

    def is_terminated(self) -> bool:
        """See :meth:`MaskingEngine.is_terminated`."""
        return bool(self._stops) and self._stops[-1]

    def is_completed(self) -> bool:
        """See :meth:`MaskingEngine.is_completed`."""
        return self.is_terminated() or bool(self._matcher.is_accepting())

    def active_rules(self) -> list[str]:
        """See :meth:`MaskingEngine.active_rules`: llguidance exposes no parser stack."""
        return []
