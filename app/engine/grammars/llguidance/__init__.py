"""llguidance as a second masking library: its compiler for this tokenizer, the mapping of
xgrammar's options onto its JSON options, and its error messages located in the source."""

from app.engine.grammars.llguidance.compiler import VERSION, LlguidanceCompiler, LlguidanceGrammar
from app.engine.grammars.llguidance.options import NOT_CARRIED_WHY, JsonOptions, json_options

__all__ = [
    "NOT_CARRIED_WHY",
    "VERSION",
    "JsonOptions",
    "LlguidanceCompiler",
    "LlguidanceGrammar",
    "json_options",
]
