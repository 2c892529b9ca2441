"""The xgrammar masking engine: a ``GrammarMatcher`` behind the :class:`MaskingEngine` seam."""

from __future__ import annotations

import torch
import xgrammar as xgr

from app.engine.grammar import CompileResult
from app.engine.parser_state import active_rules

__all__ = ["XGrammarMasking"]


class XGrammarMasking:
    """A fresh ``xgrammar.GrammarMatcher`` for a compiled grammar (unlimited rollback).

    Args:
        grammar: the grammar compiled by xgrammar for the model's tokenizer.
        matcher: the matcher to wrap (a fork); a fresh one in the start state by default.
    """

    name = "xgrammar"

    def __init__(
        self, grammar: CompileResult, *, matcher: xgr.GrammarMatcher | None = None
    ) -> None:
        self._grammar = grammar
        self._matcher = matcher or xgr.GrammarMatcher(grammar.compiled)
        self._rule_names = grammar.rule_names

    def fork(self) -> XGrammarMasking:
        """See :meth:`MaskingEngine.fork`: ``GrammarMatcher.fork()``."""
        return XGrammarMasking(self._grammar, matcher=self._matcher.fork())

    def fill_next_token_bitmask(self, bitmask: torch.Tensor) -> None:
        """See :meth:`MaskingEngine.fill_next_token_bitmask`."""
        if self._matcher.is_terminated():
            bitmask[0].zero_()
        else:
            self._matcher.fill_next_token_bitmask(bitmask)

    def accept_token(self, token_id: int) -> bool:
        """See :meth:`MaskingEngine.accept_token`."""
        return bool(self._matcher.accept_token(token_id))

    def probe_token(self, token_id: int) -> bool:
        """See :meth:`MaskingEngine.probe_token`.

        In xgrammar 0.2.9 a refused token leaves the matcher untouched, so only an accepted one
        is rolled back (rolling back after a refusal would undo the previous, real token).
        """
        if not self._matcher.accept_token(token_id):
            return False
        self._matcher.rollback(1)
        return True

    def accepts_bytes(self, data: bytes) -> bool:
        """See :meth:`MaskingEngine.accepts_bytes`."""
        return bool(self._matcher.fork().accept_string(data))

    def accept_bytes(self, data: bytes) -> int:
        """See :meth:`MaskingEngine.accept_bytes`: one ``accept_string``, one rollback step."""
        if not self._matcher.fork().accept_string(data):  # a refusal must leave no trace
            return 0
        return 1 if self._matcher.accept_string(data) else 0

    def rollback(self, n: int) -> None:
        """See :meth:`MaskingEngine.rollback`."""
        if n:
            self._matcher.rollback(n)

    def find_jump_forward_string(self) -> str:
        """See :meth:`MaskingEngine.find_jump_forward_string`."""
        return str(self._matcher.find_jump_forward_string())

    def is_terminated(self) -> bool:
        """See :meth:`MaskingEngine.is_terminated`."""
        return bool(self._matcher.is_terminated())

    def is_completed(self) -> bool:
        """See :meth:`MaskingEngine.is_completed`."""
        return bool(self._matcher.is_completed())

    def active_rules(self) -> list[str]:
        """See :meth:`MaskingEngine.active_rules` (read from xgrammar's debug dump)."""
        return active_rules(self._matcher, self._rule_names)
