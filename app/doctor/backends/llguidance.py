"""llguidance, run for real with this model's tokenizer: its errors, and with ``lenient`` the
keywords it ignores.

The tokenizer and the checks are the engine's
(:class:`app.engine.grammars.llguidance.LlguidanceCompiler`,
shared with llguidance as a masking engine). EBNF sources are translated to llguidance's Lark
syntax with the library's own ``gbnf_to_lark`` (xgrammar's EBNF is GBNF-like); regexes go through
``grammar_from_regex``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.gbnf_to_lark

from app.doctor.records import BackendRow, Message, Verdict
from app.engine.grammars.llguidance import LlguidanceCompiler
from app.engine.grammars.llguidance.errors import schema_pointers
from app.engine.grammars.spec import CompileOptions, GrammarKind

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # declared in the stub only

__all__ = ["Llguidance"]


def _pointers(schema: Any, message: str) -> list[str]:
    """Where the keywords or formats a message names are in the schema."""
    return schema_pointers(schema, message) or [""]


class Llguidance:
    """llguidance's verdicts on a grammar, with the engine's llguidance tokenizer.

    Args:
        compiler: the engine's llguidance compiler (it holds the tokenizer).
    """

    rules_version = f"llguidance {llguidance.__version__} (the library, run with this tokenizer)"

    def __init__(self, compiler: LlguidanceCompiler) -> None:
        self._compiler = compiler

    def check(self, grammar: str) -> tuple[bool, list[str]]:
        """``(is_error, messages)`` for a serialized llguidance grammar."""
        return self._compiler.check(grammar)

    def check_schema(self, schema: Any, options: JsonCompileOptions) -> tuple[bool, list[str]]:
        """``(is_error, messages)`` for a JSON Schema compiled with ``options``."""
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=options)
        except ValueError as error:  # e.g. a boolean schema: options apply to objects only
            return True, [str(error)]
        return self.check(grammar)

    def schema_error(self, schema: Any) -> str:
        """llguidance's error ("" when none) for a JSON Schema compiled as vLLM's guidance
        backend does: flexible whitespace, not lenient."""
        is_error, messages = self.check_schema(schema, {"whitespace_flexible": True})
        return "; ".join(messages) if is_error else ""

    def assess_schema(self, schema: Any, options: CompileOptions) -> BackendRow:
        """The row for a JSON Schema compiled with the request's whitespace option."""
        flexible = options.any_whitespace
        is_error, messages = self.check_schema(schema, {"whitespace_flexible": flexible})
        lenient_error, lenient_messages = self.check_schema(
            schema, {"whitespace_flexible": flexible, "lenient": True}
        )
        rows = [Message(m, p) for m in messages for p in _pointers(schema, m)]
        if is_error:
            rows += [
                Message(f"with lenient: {'refuses' if lenient_error else 'ignores'}: {m}", p)
                for m in lenient_messages
                for p in _pointers(schema, m)
            ]
            return BackendRow("llguidance", self.rules_version, Verdict.REFUSES, tuple(rows))
        verdict = Verdict.IGNORES if messages else Verdict.OK
        return BackendRow(
            "llguidance", self.rules_version, verdict, tuple(rows) or (Message("compiles"),)
        )

    def assess_grammar(self, kind: GrammarKind, source: str) -> BackendRow:
        """The row for an EBNF grammar or a regex."""
        try:
            if kind is GrammarKind.REGEX:
                grammar = llguidance.LLMatcher.grammar_from_regex(source)
            else:
                lark = llguidance.gbnf_to_lark.gbnf_to_lark(source)
                grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        except Exception as error:  # the translator raises its own and parser errors alike
            message = f"the EBNF does not translate to llguidance's Lark syntax: {error}"
            return BackendRow(
                "llguidance", self.rules_version, Verdict.REFUSES, (Message(message),)
            )
        is_error, messages = self.check(grammar)
        verdict = Verdict.REFUSES if is_error else Verdict.IGNORES if messages else Verdict.OK
        rows = tuple(Message(m) for m in messages) or (Message("compiles"),)
        return BackendRow("llguidance", self.rules_version, verdict, rows)
