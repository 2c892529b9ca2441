"""Witnesses: documents on which the grammar and the schema disagree, found by a seeded search.

One way, documents written by walking the grammar's token mask (no model) are judged by the
schema's own semantics; a rejected one proves the grammar weaker than the schema. The other way,
documents drawn from the schema are written as the grammar writes JSON and walked through it; a
refused one proves the grammar stricter. Properties the schema does not declare, refused because
of ``strict_mode``, are that option's effect, reported once and not as witnesses.

The search is bounded by counts (documents each way, tokens per walk, characters of drawn
documents walked), and document ``i`` depends only on (seed, i): the same seed gives the same
witnesses on any machine. Its deadline (:mod:`app.doctor.safety`) is only a safety stop: when the
machine is too busy to finish in time, the search answers with what it has and says so.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import xgrammar as xgr

from app.doctor.instances import (
    GiveUp,
    InstanceDrawer,
    TooLarge,
    Undeclared,
    without_undeclared,
)
from app.doctor.judge import Judge, WitnessError
from app.doctor.keywords import subschemas
from app.doctor.records import Direction, Refusal, Search, Witness
from app.doctor.safety import Deadline, Expired
from app.doctor.serialize import as_grammar_writes
from app.doctor.vocab import Vocab, every_allowed_id
from app.doctor.walk import STYLES, Walked, Walker
from app.engine.grammars.spec import CompileResult
from app.engine.records import Validation
from app.engine.tokens import Tokens

__all__ = [
    "DRAWN_CHARS",
    "GRAMMAR_DOCUMENTS",
    "SCHEMA_DOCUMENTS",
    "Found",
    "ValidateMany",
    "search",
]

GRAMMAR_DOCUMENTS = 96
SCHEMA_DOCUMENTS = 48
_NON_JSON_DOCUMENTS = 24
_WITNESSES_PER_DIRECTION = 8
_WALK_LIMIT = 512
#: Characters of drawn documents walked through the grammar, at most, in one search (a count:
#: documents past it are not walked, and the search says it was cut short).
DRAWN_CHARS = 1_000_000
#: Characters walked one by one to find where a refused document is refused, between two looks
#: at the deadline.
_CHECK_EVERY = 256
_EXPLORE = (2, 4, 8, 16, 32)
_EXPECTED_SAMPLE = 8
_EXPECTED_POOL = 256
_LITERALS = 64

#: Validates texts with the Pydantic model in one sandbox process: ``Sandbox.validate_many``
#: with the source and root model bound.
ValidateMany = Callable[[Sequence[str]], list[Validation]]


@dataclass(frozen=True)
class Found:
    """What a search found.

    Attributes:
        witnesses: grammar-accepts witnesses first, then schema-accepts ones.
        search: the figures of the search (None for EBNF and regex: there is no schema).
        strict_example: a schema-valid document refused only for its undeclared properties.
        shortest: the complete document with the fewest tokens the walks wrote.
        unbounded_whitespace: a run of whitespace longer than any cap was accepted somewhere.
    """

    witnesses: tuple[Witness, ...]
    search: Search | None
    strict_example: str | None
    shortest: Walked | None
    unbounded_whitespace: bool


def _walks(walker: Walker, seed: int, count: int, deadline: Deadline) -> tuple[list[Walked], bool]:
    """Up to ``count`` documents (the first one minimal); True when the safety stop passed
    first."""
    found: list[Walked] = []
    for index in range(count):
        if deadline.expired():
            return found, True
        rng = random.Random(f"{seed}/grammar/{index}")
        style = STYLES[0] if index == 0 else rng.choice(STYLES[1:])
        walked = walker.walk(rng, style, explore=rng.choice(_EXPLORE), limit=_WALK_LIMIT)
        if walked is not None:
            found.append(walked)
    return found, False


def _refusal(
    compiled: Any, tokens: Tokens, vocab: Vocab, text: str, deadline: Deadline
) -> Refusal | None:
    """None when the grammar accepts ``text`` whole, else where and what it expected.

    Raises:
        Expired: the safety stop passed while looking for where it is refused.
    """
    matcher = xgr.GrammarMatcher(compiled)
    if matcher.accept_string(text) and matcher.is_completed():
        return None
    matcher = xgr.GrammarMatcher(compiled)
    offset = len(text)
    for index, char in enumerate(text):
        if index % _CHECK_EVERY == 0:
            deadline.check()
        if not matcher.accept_string(char):
            offset = index
            break
    bitmask = xgr.allocate_token_bitmask(1, tokens.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    allowed = every_allowed_id(bitmask[0].numpy().view(np.uint32), tokens.vocab_size)
    shortest = allowed[np.argsort(vocab.lengths[allowed], kind="stable")[:_EXPECTED_POOL]]
    return Refusal(offset, tuple(tokens.shortest_texts(shortest.tolist(), _EXPECTED_SAMPLE)))


def _pick(candidates: list[Witness]) -> list[Witness]:
    """Witnesses that show a keyword not shown yet come first; at most a handful."""
    chosen: list[Witness] = []
    shown: set[str | None] = set()
    for witness in candidates:
        keys: set[str | None] = set(witness.pointers) or {None}
        if not keys <= shown:
            chosen.append(witness)
            shown |= keys
    chosen += [w for w in candidates if w not in chosen]
    return chosen[:_WITNESSES_PER_DIRECTION]


def _pydantic_errors(
    verdict: Validation, judged: tuple[WitnessError, ...]
) -> tuple[WitnessError, ...]:
    """The model's errors, each with the pointer of the schema error at the same path if any."""
    by_path = {e.path: e.pointer for e in judged}
    return tuple(WitnessError(e.path, e.message, by_path.get(e.path)) for e in verdict.errors)


class _Search:
    """One search: the grammar, the schema, the budget."""

    def __init__(
        self,
        grammar: CompileResult,
        tokens: Tokens,
        vocab: Vocab,
        schema: Any,
        *,
        seed: int,
        deadline: Deadline,
        validate_many: ValidateMany | None,
    ):
        self.grammar = grammar
        self.tokens = tokens
        self.vocab = vocab
        self.schema = schema
        self.judge = Judge(schema)
        self.seed = seed
        self.start = time.perf_counter()
        self.deadline = deadline
        self.validate_many = validate_many
        self.too_large: dict[str, None] = {}
        self.walker = Walker(
            grammar.compiled, tokens, vocab, json_output=True, literals=literals(schema),
            expired=deadline.expired,
        )  # fmt: skip

    def run(self) -> Found:
        walked, cut = _walks(self.walker, self.seed, GRAMMAR_DOCUMENTS, self.deadline)
        texts = list(dict.fromkeys(w.text for w in walked))
        # The Pydantic model judges the walked documents in its sandbox process while this
        # thread draws from the schema (drawn documents are judged by the derived schema).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="doctor-model") as pool:
            judging = pool.submit(self._model_verdicts, texts)
            refused, strict_example, drawn, cut_drawing = self._drawn()
            with self.deadline.paused():  # the sandbox's time (its own limits bound it)
                verdicts = judging.result()
        accepts = [self._grammar_witness(t, verdicts.get(t)) for t in texts]
        refusals = [
            Witness(Direction.SCHEMA_ACCEPTS, text, (), refusal) for text, refusal in refused
        ]
        search = Search(
            seed=self.seed,
            grammar_documents=len(texts),
            schema_documents=drawn,
            ms=(time.perf_counter() - self.start) * 1000,
            cut_short=cut or cut_drawing,
            unchecked_formats=tuple(self.judge.unchecked_formats()),
            too_large=tuple(self.too_large),
            cut_short_by_load=self.deadline.reached,
        )
        witnesses = _pick([w for w in accepts if w is not None]) + _pick(refusals)
        shortest = min(walked, key=lambda w: (w.tokens, len(w.text)), default=None)
        return Found(
            tuple(witnesses), search, strict_example, shortest, self.walker.unbounded_whitespace
        )

    def _model_verdicts(self, texts: list[str]) -> dict[str, Validation]:
        if self.validate_many is None or not texts:
            return {}
        return dict(zip(texts, self.validate_many(texts), strict=True))

    def _grammar_witness(self, text: str, model: Validation | None) -> Witness | None:
        judged = self.judge.text(text)
        errors = judged.errors if model is None else _pydantic_errors(model, judged.errors)
        if model is not None and judged.value is None:
            errors = judged.errors  # not JSON: the model would say so less plainly
        if not errors:
            return None
        return Witness(Direction.GRAMMAR_ACCEPTS, text, errors)

    def _drawn(self) -> tuple[list[tuple[str, Refusal]], str | None, int, bool]:
        """Schema-valid documents the grammar refuses, the strict_mode example, how many were
        drawn valid, and whether a bound (:data:`DRAWN_CHARS`, or the safety stop) came
        first."""
        refused: list[tuple[str, Refusal]] = []
        strict_example = None
        drawn = walked = 0
        strict = self.grammar.spec.options.strict_mode
        try:
            for index in range(SCHEMA_DOCUMENTS):
                if self.deadline.expired():
                    return refused, strict_example, drawn, True
                value = self._draw(index)
                if value is None:
                    continue
                text = as_grammar_writes(value, self.grammar.spec.options)
                walked += len(text)
                if walked > DRAWN_CHARS:
                    return refused, strict_example, drawn, True
                drawn += 1
                refusal = self._refusal(text)
                if refusal is None:
                    continue
                if strict and _has_undeclared(value):
                    bare = without_undeclared(value)
                    written, text = text, as_grammar_writes(bare, self.grammar.spec.options)
                    refusal = self._refusal(text)
                    if refusal is None:  # refused for its undeclared properties only
                        strict_example = strict_example or written
                        continue
                    if self.judge.value(bare):  # without them, the schema rejects it
                        continue
                refused.append((text, refusal))
        except Expired:
            return refused, strict_example, drawn, True
        return refused, strict_example, drawn, False

    def _refusal(self, text: str) -> Refusal | None:
        return _refusal(self.grammar.compiled, self.tokens, self.vocab, text, self.deadline)

    def _draw(self, index: int) -> Any:
        try:
            value = InstanceDrawer(self.schema, random.Random(f"{self.seed}/schema/{index}")).draw()
        except TooLarge as refused:
            self.too_large[str(refused)] = None
            return None
        except (GiveUp, RecursionError):
            return None
        return None if self.judge.value(value) else value


def literals(schema: Any) -> tuple[str, ...]:
    """JSON texts of the values the schema names: const and enum values, numeric bounds and
    their integer neighbours."""
    found: dict[str, None] = {}
    for _, node in subschemas(schema):
        values = [node["const"]] if "const" in node else []
        values += node["enum"] if isinstance(node.get("enum"), list) else []
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            bound = node.get(key)
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                values += [bound, bound - 1, bound + 1] if isinstance(bound, int) else [bound]
        for value in values:
            found[json.dumps(value, ensure_ascii=False)] = None
    return tuple(found)[:_LITERALS]


def _has_undeclared(value: Any) -> bool:
    if isinstance(value, Undeclared) and value.undeclared:
        return True
    if isinstance(value, dict):
        return any(_has_undeclared(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_undeclared(v) for v in value)
    return False


def search(
    grammar: CompileResult,
    tokens: Tokens,
    vocab: Vocab,
    *,
    schema: Any | None,
    seed: int,
    deadline: Deadline,
    validate_many: ValidateMany | None = None,
) -> Found:
    """Search for witnesses (JSON Schema sources), the shortest document and whitespace runs.

    Args:
        grammar: the compiled grammar.
        tokens: the tokenizer it was compiled for.
        vocab: that tokenizer's vocabulary sorted by kind.
        schema: the parsed JSON Schema; None for EBNF and regex (no witnesses then).
        seed: the search's seed.
        deadline: the search's safety stop (its work is bounded by counts).
        validate_many: for Pydantic sources, the model's own validation of a batch of texts.
    """
    if schema is not None:
        return _Search(
            grammar,
            tokens,
            vocab,
            schema,
            seed=seed,
            deadline=deadline,
            validate_many=validate_many,
        ).run()
    walker = Walker(grammar.compiled, tokens, vocab, json_output=False, expired=deadline.expired)
    walked, _ = _walks(walker, seed, _NON_JSON_DOCUMENTS, deadline)
    shortest = min(walked, key=lambda w: (w.tokens, len(w.text)), default=None)
    return Found((), None, None, shortest, walker.unbounded_whitespace)
