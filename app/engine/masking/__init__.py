"""Masking engines: the library that says which tokens the grammar allows next.

The stepper and replay call only :class:`MaskingEngine`; :func:`new_masking` is the one place
that picks the library for a compiled grammar.
"""

from __future__ import annotations

from app.engine.grammars.spec import CompileResult, MaskingLibrary
from app.engine.masking.base import MaskingEngine
from app.engine.masking.llguidance import LlguidanceMasking
from app.engine.masking.xgrammar import XGrammarMasking

__all__ = ["LlguidanceMasking", "MaskingEngine", "XGrammarMasking", "new_masking"]


def new_masking(grammar: CompileResult) -> MaskingEngine:
    """A masking engine of the library that compiled ``grammar``, in its start state."""
    if grammar.spec.library is MaskingLibrary.LLGUIDANCE:
        return LlguidanceMasking(grammar)
    return XGrammarMasking(grammar)
