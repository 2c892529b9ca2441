"""llguidance with this model's tokenizer: one tokenizer, compiles in-process, a cache.

llguidance builds its parser when a matcher is made (milliseconds for the examples) and bounds
that work with its own fuel limits (``LLParserLimits``), so a compile needs no worker process:
it runs on the caller's thread (the web layer's compile pool) and is cut off by llguidance itself
when a grammar is too large. The time reported is the time to the first mask.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import llguidance
import llguidance.gbnf_to_lark
import llguidance.hf
import torch

from app.engine.grammars.compile_worker import parse_schema
from app.engine.grammars.llguidance.errors import grammar_error, lark_error
from app.engine.grammars.llguidance.options import json_options
from app.engine.grammars.llguidance.tags import tag_grammar
from app.engine.grammars.spec import CompileResult, GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import TAG_NOT_CARRIED
from app.engine.mask import new_bitmask
from app.engine.tokens import Tokens
from app.exceptions import GrammarError

__all__ = ["LlguidanceCompiler", "LlguidanceGrammar", "VERSION", "fill_bitmask"]

VERSION: str = llguidance.__version__

_CACHE_ENTRIES = 256


def fill_bitmask(matcher: llguidance.LLMatcher, bitmask: torch.Tensor) -> None:
    """Compute the matcher's mask into row 0 of a contiguous int32 CPU ``bitmask``.

    What ``llguidance.torch.fill_next_token_bitmask`` does, without importing that module
    (it sets up ``torch.compile`` at import).
    """
    row = bitmask[0]
    matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())


@dataclass(frozen=True)
class LlguidanceGrammar:
    """What an llguidance matcher is built from.

    Attributes:
        tokenizer: llguidance's tokenizer for the model (``config.vocab_size`` wide, the model's
            stop ids as its EOS tokens).
        grammar: the serialized grammar ``LLMatcher`` takes.
        stop_ids: the ids that end generation, as the xgrammar side knows them.
    """

    tokenizer: llguidance.LLTokenizer
    grammar: str
    stop_ids: frozenset[int]

    def matcher(self) -> llguidance.LLMatcher:
        """A fresh matcher in the grammar's start state."""
        return llguidance.LLMatcher(self.tokenizer, self.grammar, log_level=0)


class LlguidanceCompiler:
    """Compiles grammar requests with llguidance for one tokenizer, caching by request.

    Args:
        tokens: the model's tokenizer as the engine holds it.
    """

    def __init__(self, tokens: Tokens) -> None:
        self._tokens = tokens
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, CompileResult] = OrderedDict()

    def tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's tokenizer, built once (about a second): as wide as the logits
        (``config.vocab_size``, so both libraries' bitmasks have one width) and with every stop
        id of the model as an EOS token (llguidance's default is the tokenizer's one EOS)."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llguidance.hf.from_tokenizer(
                    self._tokens.tokenizer,
                    n_vocab=self._tokens.vocab_size,
                    eos_token=sorted(self._tokens.stop_ids),
                )
            return self._tokenizer

    def check(self, grammar: str) -> tuple[bool, list[str]]:
        """``(is_error, messages)`` for a serialized llguidance grammar with this tokenizer."""
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            grammar, self.tokenizer()
        )
        return bool(is_error), [str(m) for m in messages]

    def cached(self, spec: GrammarSpec) -> CompileResult | None:
        """The cached result for ``spec`` (``cached=True``), or None."""
        with self._lock:
            hit = self._cache.get(spec.cache_key())
            if hit is not None:
                self._cache.move_to_end(spec.cache_key())
            return hit

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """Compile ``spec`` with llguidance, or return the cached result.

        Raises:
            GrammarError: the source does not parse, does not translate to llguidance's syntax,
                or llguidance refuses it (located where its message says).
        """
        hit = self.cached(spec)
        if hit is not None:
            return hit
        tokenizer = self.tokenizer()  # built once per process, not part of any compile
        start = time.perf_counter()
        grammar, not_carried, notes = self._serialized(spec)
        compiled = LlguidanceGrammar(tokenizer, grammar, self._tokens.stop_ids)
        matcher = compiled.matcher()
        if matcher.is_error():
            raise self._error(spec, matcher.get_error())
        fill_bitmask(matcher, new_bitmask(self._tokens.vocab_size))
        if matcher.is_error():  # the first mask ran out of llguidance's fuel
            raise self._error(spec, matcher.get_error())
        result = CompileResult(
            spec=spec,
            compiled=compiled,
            grammar_text=grammar,
            rule_names=(),
            warnings=(*notes, *matcher.get_grammar_warnings()),
            compile_ms=(time.perf_counter() - start) * 1000,
            size_bytes=len(grammar.encode("utf-8")),
            not_carried=not_carried,
        )
        self._remember(spec, result)
        return result

    def serialize(self, spec: GrammarSpec) -> tuple[str, tuple[str, ...]]:
        """llguidance's serialized grammar for ``spec`` and the options it does not carry.

        Raises:
            GrammarError: the source does not parse or does not translate.
        """
        grammar, not_carried, _ = self._serialized(spec)
        return grammar, not_carried

    def _serialized(self, spec: GrammarSpec) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """The grammar, the options not carried, and what llguidance does that the source
        does not say (for a structural tag)."""
        if spec.kind is GrammarKind.STRUCTURAL_TAG:  # as vLLM's guidance backend takes it
            tag = tag_grammar(spec.source, self.tokenizer())
            return tag.grammar, TAG_NOT_CARRIED, tag.warnings
        if spec.kind not in (GrammarKind.REGEX, GrammarKind.EBNF, GrammarKind.JSON_SCHEMA):
            raise GrammarError(
                f"llguidance cannot mask a {spec.kind.value} source: the tag a tools builder "
                'makes is xgrammar\'s {"type": "structural_tag", "format": ...} form, which '
                "llguidance (like vLLM 0.32.0's guidance backend) does not take; mask it with "
                "xgrammar"
            )
        grammar, not_carried = self._plain(spec)
        return grammar, not_carried, ()

    def _plain(self, spec: GrammarSpec) -> tuple[str, tuple[str, ...]]:
        if spec.kind is GrammarKind.REGEX:
            return llguidance.LLMatcher.grammar_from_regex(spec.source), ()
        if spec.kind is GrammarKind.EBNF:
            return llguidance.LLMatcher.grammar_from_lark(_lark(spec.source)), ()
        carried = json_options(parse_schema(spec.source), spec.options)
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                carried.schema,
                defaults=carried.options,  # type: ignore[arg-type]
            )
        except ValueError as error:  # a boolean schema: llguidance takes objects only
            raise GrammarError(f"llguidance: {error}", line=1, column=1) from None
        return grammar, carried.not_carried

    def _error(self, spec: GrammarSpec, message: str) -> GrammarError:
        if spec.kind is GrammarKind.EBNF:
            is_lark = llguidance.gbnf_to_lark.is_lark_syntax(spec.source)
            return lark_error(is_lark, message)
        schema: Any = None
        if spec.kind is GrammarKind.JSON_SCHEMA:
            schema = parse_schema(spec.source)
        return grammar_error(spec.kind, spec.source, schema, message)

    def _remember(self, spec: GrammarSpec, result: CompileResult) -> None:
        with self._lock:
            self._cache[spec.cache_key()] = dataclasses.replace(result, cached=True)
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)


def _lark(source: str) -> str:
    """The EBNF (GBNF-like, as xgrammar reads it) in llguidance's Lark syntax, by llguidance's
    own translator; a grammar already in Lark syntax is kept."""
    try:
        return llguidance.gbnf_to_lark.any_to_lark(source)
    except llguidance.gbnf_to_lark.GbnfToLarkError as error:
        text, offset = error.pos.text, error.pos.pos
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise GrammarError(
            f"the EBNF does not translate to llguidance's Lark syntax: {error}",
            line=line,
            column=column,
        ) from None
    except Exception as error:  # the translator raises plain exceptions for what it lacks
        raise GrammarError(
            f"the EBNF does not translate to llguidance's Lark syntax: {error}"
        ) from None
