"""The end of generation as vLLM decides it: the stop-token set, ``min_tokens``, stop strings.

vLLM (0.32.0, read in ``.venv-vllm``) ends a request in three places, and this module applies
each the way it does:

- the stop-token set (``SamplingParams``): the tokenizer's EOS is the primary end token; the
  generation config's EOS list and the request's ``stop_token_ids`` join it in
  ``all_stop_token_ids``, which is what the stack passes to xgrammar (``override_stop_tokens`` in
  ``v1/structured_output/backend_xgrammar.py``): the tokens the grammar allows once it can end;
- ``MinTokensLogitsProcessor`` (``v1/sample/logits_processor/builtin.py``): while fewer than
  ``min_tokens`` tokens are out, every id of ``all_stop_token_ids`` is set to ``-inf``, after the
  grammar's mask. Where the grammar allows only a stop, nothing is left (#53665, #47489);
- the stop checker (``v1/core/sched/utils.py:check_stop``, ``v1/engine/detokenizer.py``): the EOS
  and ``stop_token_ids`` end the request; a ``stop`` string ends it where it first appears in the
  text after the first ``min_tokens`` tokens, and the text is cut before it.

A model without a generation config (the shipped tokenizers) has its stop ids stand in for the
config's EOS list; :attr:`StopSet.source` says where the list came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.mask import count_allowed
from app.engine.model.shipped_tokenizers import SHIPPED
from app.engine.tokens import Tokens
from app.exceptions import InvalidInput

__all__ = [
    "EMPTY_MASK",
    "EmptyMask",
    "EndReport",
    "EndRules",
    "EndWalk",
    "StopHit",
    "StopSet",
    "UnallowedEnd",
    "end_walk",
    "first_stop_string",
    "stop_set",
    "stop_source",
    "without_stops",
]

#: The flag of a step whose allowed set is empty after the grammar and every processor.
EMPTY_MASK = "empty mask: vLLM aborts this request"
#: What vLLM 0.32.0's processor does with such a row for a structured-output request.
RESTORED = (
    "vLLM 0.32.0's MinTokensLogitsProcessor puts the stop tokens back when a structured-output "
    "row would be all -inf, so that release ends the request early instead; earlier releases "
    "abort it (#53665, #47489)"
)
#: At most this many stop strings, each at most this many characters (vLLM has no cap).
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256


@dataclass(frozen=True, slots=True)
class EndRules:
    """A request's end-of-generation parameters, as ``SamplingParams`` takes them."""

    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()

    def check(self, tokens: Tokens) -> None:
        """Refuse ids outside the vocabulary and empty stop strings, naming where.

        Raises:
            InvalidInput: a bad id or string, with its JSON pointer.
        """
        if self.min_tokens < 0:
            raise InvalidInput("min_tokens must be >= 0", pointer="/min_tokens")
        for i, token_id in enumerate(self.stop_token_ids):
            if not 0 <= token_id < tokens.vocab_size:
                raise InvalidInput(
                    f"stop_token_ids[{i}] = {token_id} is outside the vocabulary "
                    f"(0..{tokens.vocab_size - 1})",
                    pointer=f"/stop_token_ids/{i}",
                )
        for i, text in enumerate(self.stop):
            if not text:
                raise InvalidInput(f"stop[{i}] is empty", pointer=f"/stop/{i}")

    @property
    def active(self) -> bool:
        """Whether any rule is set (else a report adds nothing to the grammar's own end)."""
        return bool(self.min_tokens or self.stop_token_ids or self.stop)


@dataclass(frozen=True, slots=True)
class StopSet:
    """The ids that end generation, by where each comes from.

    Attributes:
        tokenizer_eos: the tokenizer's EOS (vLLM's primary ``eos_token_id``), if it has one.
        generation_eos: the generation config's EOS list (or what stands in for it).
        source: where ``generation_eos`` came from, in words.
        request: the request's ``stop_token_ids``.
        to_xgrammar: what vLLM passes to xgrammar (``all_stop_token_ids``): all of the above.
        grammar_stops: the stop ids the compiled grammar's matcher allows at its end here.
    """

    tokenizer_eos: int | None
    generation_eos: tuple[int, ...]
    source: str
    request: tuple[int, ...]
    to_xgrammar: tuple[int, ...]
    grammar_stops: tuple[int, ...]

    @property
    def model_end(self) -> frozenset[int]:
        """The tokens the model was trained to end with: the EOS and the config's list."""
        eos = () if self.tokenizer_eos is None else (self.tokenizer_eos,)
        return frozenset((*eos, *self.generation_eos))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "tokenizer_eos": self.tokenizer_eos,
            "generation_eos": list(self.generation_eos),
            "source": self.source,
            "request": list(self.request),
            "to_xgrammar": list(self.to_xgrammar),
            "grammar_stops": list(self.grammar_stops),
        }


def stop_source(model: Any) -> str:
    """Where ``model``'s stop ids came from: a tokenizer-only model's ``stop_token_ids``, a
    shipped tokenizer's list (it has no generation config), or the model's own config."""
    spec = getattr(model, "spec", None)
    if getattr(spec, "stop_token_ids", None) is not None:
        return "MASKSCOPE_TOKENIZERS stop_token_ids (standing in for a generation config)"
    if getattr(spec, "tokenizer", None) in SHIPPED:
        return (
            "the shipped tokenizer's stop_token_ids: it has no generation config, so they "
            "stand in for its EOS list"
        )
    return "the generation config's eos_token_id (else the model's, else the tokenizer's)"


def stop_set(
    tokens: Tokens, rules: EndRules, *, source: str, grammar_stops: Iterable[int] = ()
) -> StopSet:
    """The stop-token set of a request on ``tokens`` with ``rules``, as vLLM builds it."""
    eos = getattr(tokens.tokenizer, "eos_token_id", None)
    eos = int(eos) if isinstance(eos, int) and 0 <= eos < tokens.vocab_size else None
    generation = tuple(sorted(tokens.stop_ids))
    every = set(generation) | set(rules.stop_token_ids) | ({eos} if eos is not None else set())
    return StopSet(
        tokenizer_eos=eos,
        generation_eos=generation,
        source=source,
        request=tuple(rules.stop_token_ids),
        to_xgrammar=tuple(sorted(every)),
        grammar_stops=tuple(sorted(set(grammar_stops))),
    )


@dataclass(frozen=True, slots=True)
class EmptyMask:
    """A step whose allowed set is empty once ``min_tokens`` took the stops away."""

    step: int
    grammar_allowed: int
    stops_removed: tuple[int, ...]
    flag: str = EMPTY_MASK
    note: str = RESTORED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "step": self.step,
            "grammar_allowed": self.grammar_allowed,
            "stops_removed": list(self.stops_removed),
            "flag": self.flag,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class UnallowedEnd:
    """The finding: where the grammar can end, a token the model ends with is not allowed."""

    step: int
    missing: tuple[int, ...]
    allowed_stops: tuple[int, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "step": self.step,
            "missing": list(self.missing),
            "allowed_stops": list(self.allowed_stops),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class StopHit:
    """Where vLLM's stop checker ends the request: ``by`` ``eos``, ``stop_token_ids`` or
    ``stop`` (a string, ``what``), at token ``step``; ``text_end`` is where the returned text
    ends (in characters: a stop string is cut off)."""

    step: int
    by: str
    what: str
    text_end: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"step": self.step, "by": self.by, "what": self.what, "text_end": self.text_end}


@dataclass(frozen=True, slots=True)
class EndReport:
    """The end of generation over a walk: the stop set, what the grammar allows once it can
    end, the steps ``min_tokens`` empties, the end token it refuses, where the request stops.

    Attributes:
        rules: the request's parameters.
        stops: the stop-token set.
        can_end_at: the first step at which the grammar allows a stop (None: never).
        allowed_at_end: the stop ids the grammar allows there.
        empty_masks: every step flagged :data:`EMPTY_MASK`.
        unallowed_end: the finding, at the first step where it holds (None: none).
        stopped: where the stop checker ends the request (None: not within the walk).
        min_tokens_refused: steps whose token is a stop that ``min_tokens`` had masked.
    """

    rules: EndRules
    stops: StopSet
    can_end_at: int | None
    allowed_at_end: tuple[int, ...]
    empty_masks: tuple[EmptyMask, ...]
    unallowed_end: UnallowedEnd | None
    stopped: StopHit | None
    min_tokens_refused: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "min_tokens": self.rules.min_tokens,
            "stop_token_ids": list(self.rules.stop_token_ids),
            "stop": list(self.rules.stop),
            "stops": self.stops.to_dict(),
            "can_end_at": self.can_end_at,
            "allowed_at_end": list(self.allowed_at_end),
            "empty_masks": [e.to_dict() for e in self.empty_masks],
            "unallowed_end": self.unallowed_end.to_dict() if self.unallowed_end else None,
            "stopped": self.stopped.to_dict() if self.stopped else None,
            "min_tokens_refused": list(self.min_tokens_refused),
        }


def _unallowed_message(tokens: Tokens, missing: Sequence[int], step: int) -> str:
    names = ", ".join(f"{tokens.text(i)!r} ({i})" for i in missing)
    return (
        f"at step {step} the grammar can end, but the model's end token {names} is not an "
        "allowed stop there: a model that ends with it is refused (vLLM #51693: an HTTP 500; "
        "#52153: the EOS list was not passed to xgrammar)"
    )


@dataclass
class EndWalk:
    """Fed one step at a time (its allowed vector and its token), it builds the
    :class:`EndReport`: a replay and a session call :meth:`step`, then :meth:`report`."""

    tokens: Tokens
    rules: EndRules
    stops: StopSet
    _text: bytes = b""
    _offsets: list[int] = field(default_factory=list)
    _can_end_at: int | None = None
    _allowed_at_end: tuple[int, ...] = ()
    _empty: list[EmptyMask] = field(default_factory=list)
    _unallowed: UnallowedEnd | None = None
    _stopped: StopHit | None = None
    _refused: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._every = np.array(self.stops.to_xgrammar, dtype=np.int64)
        self._grammar = np.array(self.stops.grammar_stops, dtype=np.int64)

    @property
    def stopped(self) -> bool:
        """Whether the stop checker has ended the request."""
        return self._stopped is not None

    def step(self, index: int, allowed: np.ndarray | None, token_id: int | None) -> None:
        """Record step ``index``: ``allowed`` its grammar mask (None: unmasked, the reasoning
        is open), ``token_id`` its token (None: the walk ended before one was taken)."""
        if self._stopped is not None:
            return
        if allowed is not None:
            self._masked(index, allowed)
        if token_id is not None:
            self._taken(index, token_id)

    def _masked(self, index: int, allowed: np.ndarray) -> None:
        stops = self._grammar[allowed[self._grammar]] if self._grammar.size else self._grammar
        if stops.size and self._can_end_at is None:
            self._can_end_at, self._allowed_at_end = index, tuple(int(i) for i in stops)
        if stops.size and self._unallowed is None:
            missing = sorted(self.stops.model_end - {int(i) for i in stops})
            if missing:
                message = _unallowed_message(self.tokens, missing, index)
                found = UnallowedEnd(index, tuple(missing), tuple(int(i) for i in stops), message)
                self._unallowed = found
        if index < self.rules.min_tokens:
            # MinTokensLogitsProcessor: -inf on every stop id, after the grammar's mask
            after = allowed.copy()
            after[self._every] = False
            if not after.any():
                removed = tuple(int(i) for i in self._every[allowed[self._every]])
                self._empty.append(EmptyMask(index, int(allowed.sum()), removed))

    def _taken(self, index: int, token_id: int) -> None:
        if token_id in self._every and index < self.rules.min_tokens:
            self._refused.append(index)
        self._offsets.append(len(self._text))
        self._text += self.tokens.output_bytes(token_id)
        chars = len(self._text.decode("utf-8", errors="ignore"))
        if token_id == self.stops.tokenizer_eos:
            self._stopped = StopHit(index, "eos", self.tokens.text(token_id), chars)
        elif token_id in self.stops.request or token_id in self.stops.generation_eos:
            self._stopped = StopHit(index, "stop_token_ids", self.tokens.text(token_id), chars)
        elif self.rules.stop and index + 1 > self.rules.min_tokens:
            self._stop_string(index)

    def _stop_string(self, index: int) -> None:
        # the detokenizer searches only the text after the first min_tokens tokens
        start = self._offsets[self.rules.min_tokens] if self.rules.min_tokens else 0
        found = first_stop_string(self._text, start, self.rules.stop)
        if found is not None:
            at, what = found
            cut = len(self._text[:at].decode("utf-8", errors="ignore"))
            self._stopped = StopHit(index, "stop", what, cut)

    def report(self) -> EndReport:
        """What the walk found."""
        return EndReport(
            rules=self.rules,
            stops=self.stops,
            can_end_at=self._can_end_at,
            allowed_at_end=self._allowed_at_end,
            empty_masks=tuple(self._empty),
            unallowed_end=self._unallowed,
            stopped=self._stopped,
            min_tokens_refused=tuple(self._refused),
        )


def end_walk(grammar: Any, tokens: Tokens, rules: EndRules, *, model: Any) -> EndWalk:
    """An :class:`EndWalk` for ``grammar`` (a ``CompileResult``) on ``model``'s ``tokens``.

    Raises:
        InvalidInput: a rule names an id outside the vocabulary, or an empty stop string.
    """
    rules.check(tokens)
    info = getattr(grammar.compiled, "tokenizer_info", None)  # xgrammar's: what its mask ends on
    own = info.stop_token_ids if info is not None else tokens.stop_ids
    stops = stop_set(tokens, rules, source=stop_source(model), grammar_stops=own)
    return EndWalk(tokens, rules, stops)


def first_stop_string(text: bytes, start: int, stop: Sequence[str]) -> tuple[int, str] | None:
    """The earliest of the ``stop`` strings in ``text`` at or after byte ``start``, with its
    byte offset (None: none is there)."""
    found = [(at, s) for s in stop if (at := text.find(s.encode(), start)) >= 0]
    return min(found) if found else None


def without_stops(bitmask: Any, stops: Sequence[int], vocab_size: int) -> Any:
    """``bitmask`` (a ``(1, words)`` int32 tensor) after vLLM's ``MinTokensLogitsProcessor``:
    a copy with the ``stops`` cleared; ``bitmask`` itself when that leaves nothing allowed
    (vLLM 0.32.0 then puts the stop logits back for a structured-output request)."""
    cleared = bitmask.clone()
    words = cleared.numpy().view(np.uint32)
    for stop in stops:
        if stop < vocab_size:
            words[0, stop >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (stop & 31)))
    return cleared if count_allowed(cleared[0], vocab_size) else bitmask
