"""Complete documents drawn from a grammar alone, with no model: walk the token mask.

Each walk starts a fresh ``GrammarMatcher`` and, at every step, takes an allowed token chosen by
a *style*, for a few steps (exploring), then steers to an end (finishing): the stop token as soon
as the grammar can end, else tokens that close strings, arrays and objects, else short tokens that
open nothing. The styles:

- ``minimal``: finish from the first step, taking the longest such token: few tokens in all;
- ``uniform``: any allowed token (whitespace-only ones rarely);
- ``short``: one-byte tokens where the grammar allows them (small numbers, short strings);
- ``echo``: like ``short``, and an array item after the first repeats the first one's text
  (duplicates are what ``uniqueItems`` forbids and a random walk almost never writes);
- ``literal``: like ``short``, and where a value may start, often one of the schema's own
  literals (its ``const`` and ``enum`` values, its numeric bounds): the values conditions such
  as ``if``/``then`` and ``not`` turn on.

What the grammar forces (keys, separators) is taken at once (jump-forward); it counts as many
tokens as the tokenizer makes of it.

A walk is a pure function of its random generator, so a seed gives the same documents. It is
bounded by its token count (``limit``); the safety stop (``expired``, checked before each token)
only abandons it when the machine is too busy (:mod:`app.doctor.safety`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import xgrammar as xgr

from app.doctor.vocab import IdSet, Vocab, allowed_ids
from app.engine.tokens import Tokens

__all__ = ["STYLES", "Walked", "Walker"]

STYLES = ("minimal", "uniform", "short", "echo", "literal")
_LITERAL = 0.6
_ECHO = 0.7
_STOP_WHILE_EXPLORING = 0.35
_SKIP_BLANK = 0.9
_WHITESPACE_RUN = 1025  # beyond the largest max_whitespace_cnt a request may set (1024)
_WHITESPACE_PROBES = 32
_VALUE_START = frozenset(b"{[,:")  # where whitespace between JSON tokens may go, too


@dataclass(frozen=True)
class Walked:
    """A complete document the grammar accepts: its text and its token count (stop excluded)."""

    text: str
    tokens: int


@dataclass
class _Scan:
    """The JSON structure of the text written so far: string state, and each open array's first
    item (its start offset, and its end once a comma follows it)."""

    data: bytearray = field(default_factory=bytearray)
    in_string: bool = False
    escaped: bool = False
    stack: list[list[int] | None] = field(default_factory=list)

    def feed(self, chunk: bytes) -> None:
        for byte in chunk:
            self.data.append(byte)
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif byte == 0x5C:
                    self.escaped = True
                elif byte == 0x22:
                    self.in_string = False
            elif byte == 0x22:
                self.in_string = True
            elif byte == 0x5B:
                self.stack.append([len(self.data), -1])
            elif byte == 0x7B:
                self.stack.append(None)
            elif byte in (0x5D, 0x7D) and self.stack:
                self.stack.pop()
            elif byte == 0x2C and self.stack and (top := self.stack[-1]) is not None:
                if top[1] < 0:
                    top[1] = len(self.data) - 1

    def at_value(self) -> bool:
        """Whether a value (or a key) may start here: nothing written yet, or after ``{[,:``."""
        last = self.data.rstrip()[-1:]
        return not self.in_string and (not last or last[0] in _VALUE_START)

    def after_first_item(self) -> bool:
        """Whether the first item of the innermost array may just have ended."""
        top = self.stack[-1] if self.stack else None
        return top is not None and top[1] < 0 and not self.in_string and len(self.data) > top[0]

    def first_item(self) -> bytes | None:
        """At the start of an array item after the first: the first item's text."""
        top = self.stack[-1] if self.stack else None
        if self.in_string or top is None or top[1] < 0 or self.data.rstrip()[-1:] != b",":
            return None
        return bytes(self.data[top[0] : top[1]]).strip()


class Walker:
    """Draws complete documents from one compiled grammar.

    Args:
        compiled: the ``xgrammar.CompiledGrammar``.
        tokens: the tokenizer it was compiled for.
        vocab: the tokenizer's vocabulary sorted by kind.
        json_output: the grammar writes JSON (structure-aware steering and whitespace probes).
        literals: JSON texts of values the schema names, for the ``literal`` style.
        expired: the safety stop, asked before each token (None: none).
    """

    def __init__(
        self,
        compiled: object,
        tokens: Tokens,
        vocab: Vocab,
        *,
        json_output: bool,
        literals: tuple[str, ...] = (),
        expired: Callable[[], bool] | None = None,
    ):
        self._compiled = compiled
        self._expired = expired
        self._tokens = tokens
        self._vocab = vocab
        self._json = json_output
        self._literals = literals
        self._bitmask = xgr.allocate_token_bitmask(1, vocab.size)
        self._words: np.ndarray = self._bitmask[0].numpy().view(np.uint32)
        self._probes_left = _WHITESPACE_PROBES
        self.unbounded_whitespace = False

    def walk(self, rng: random.Random, style: str, *, explore: int, limit: int) -> Walked | None:
        """One document, or None when the walk did not end within ``limit`` tokens (or the
        safety stop passed)."""
        matcher = xgr.GrammarMatcher(self._compiled)
        scan = _Scan()
        count = 0
        while count < limit:
            if self._expired is not None and self._expired():
                return None
            self._probe_whitespace(matcher, scan)
            if style == "echo" and scan.after_first_item() and rng.random() < _ECHO:
                count += self._take(rng, matcher, scan, self._vocab.commas)
            # a separator's forced whitespace first: the text replayed next starts after it
            count += self._jump_forward(matcher, scan, whitespace_only=True)
            if style == "echo" and (item := scan.first_item()):
                echoed = self._replay(matcher, scan, item.decode("utf-8", errors="ignore"))
                count += self._take(rng, matcher, scan, self._vocab.item_ends) if echoed else 0
                count += echoed
            if style == "literal" and self._literals and scan.at_value():
                if rng.random() < _LITERAL:
                    count += self._replay(matcher, scan, rng.choice(self._literals))
            count += self._jump_forward(matcher, scan)
            matcher.fill_next_token_bitmask(self._bitmask)
            finishing = count >= explore or style == "minimal"
            token = self._choose(rng, style, finishing=finishing, in_string=scan.in_string)
            if token is None or not matcher.accept_token(token):
                return None
            if matcher.is_terminated():
                return self._document(scan, count)
            scan.feed(self._tokens.output_bytes(token))
            count += 1
        return None

    def _take(
        self, rng: random.Random, matcher: xgr.GrammarMatcher, scan: _Scan, ids: IdSet
    ) -> int:
        """One of ``ids`` if the grammar allows one here: a comma after a first array item (so
        there is a second to repeat it), or the end of the item just repeated (a number could
        otherwise grow into another one)."""
        matcher.fill_next_token_bitmask(self._bitmask)
        ends = ids.allowed(self._words)
        if not len(ends):
            return 0
        token = int(ends[rng.randrange(len(ends))])
        if not matcher.accept_token(token):
            return 0
        scan.feed(self._tokens.output_bytes(token))
        return 1

    def _jump_forward(
        self, matcher: xgr.GrammarMatcher, scan: _Scan, *, whitespace_only: bool = False
    ) -> int:
        """Take what the grammar forces (a key, a separator) at once, or only its leading
        whitespace; it counts as many tokens as the tokenizer makes of it."""
        forced = matcher.find_jump_forward_string()
        if whitespace_only:
            forced = forced[: len(forced) - len(forced.lstrip())]
        if not forced or not matcher.accept_string(forced):
            return 0
        scan.feed(forced.encode("utf-8"))
        return len(self._tokens.encode(forced))

    def _document(self, scan: _Scan, count: int) -> Walked | None:
        try:
            return Walked(bytes(scan.data).decode("utf-8"), count)
        except UnicodeDecodeError:
            return None

    def _choose(
        self, rng: random.Random, style: str, *, finishing: bool, in_string: bool
    ) -> int | None:
        words, vocab = self._words, self._vocab
        stops = vocab.stop.allowed(words)
        if len(stops) and (finishing or rng.random() < _STOP_WHILE_EXPLORING):
            return int(stops[0])
        if finishing and self._json:
            # echo ends a string alone, so that its array can still get a second item
            ending = vocab.quotes if style == "echo" else vocab.string_closers
            closers = (ending if in_string else vocab.closers).allowed(words)
            if len(closers):
                return int(closers[0])
        ids = allowed_ids(words, vocab.size)
        if ids is not None:
            ids = ids[vocab.lengths[ids] > 0]
            if not len(ids):
                return int(stops[0]) if len(stops) else None
        if finishing:
            return self._finish(rng, ids, longest=style == "minimal")
        if style in ("short", "echo", "literal"):
            single = vocab.single.allowed(words)
            if len(single):
                return int(single[rng.randrange(len(single))])
        return self._uniform(rng, ids)

    def _uniform(self, rng: random.Random, ids: np.ndarray | None) -> int | None:
        vocab = self._vocab
        if ids is None:  # dense: draw until a draw is allowed (expected a handful of draws)
            usable = vocab.usable.ids
            for _ in range(256):
                token = int(usable[rng.randrange(len(usable))])
                allowed = (int(self._words[token >> 5]) >> (token & 31)) & 1
                if allowed and not (vocab.blank[token] and rng.random() < _SKIP_BLANK):
                    return token
            ids = self._all_allowed()
        if not len(ids):
            return None
        visible = ids[~vocab.blank[ids]]
        pool = visible if len(visible) and rng.random() < _SKIP_BLANK else ids
        return int(pool[rng.randrange(len(pool))])

    def _finish(self, rng: random.Random, ids: np.ndarray | None, *, longest: bool) -> int | None:
        """Short tokens that open nothing (the longest one for ``minimal``)."""
        vocab = self._vocab
        if ids is None:
            ids = self._all_allowed() if longest else vocab.single.allowed(self._words)
        calm = ids[~vocab.openers[ids] & ~vocab.blank[ids]] if len(ids) else ids
        pool = calm if len(calm) else ids
        if not len(pool):
            return self._uniform(rng, None)
        lengths = vocab.lengths[pool]
        if longest:
            return int(pool[int(np.argmax(lengths))])
        shortest = pool[lengths == lengths.min()]
        return int(shortest[rng.randrange(len(shortest))])

    def _all_allowed(self) -> np.ndarray:
        return self._vocab.usable.allowed(self._words)

    def _replay(self, matcher: xgr.GrammarMatcher, scan: _Scan, text: str) -> int:
        """Write ``text`` as the tokenizer splits it; on any refusal, undo it all and write
        nothing (the walk then chooses as usual)."""
        ids = self._tokens.encode(text)
        for done, token in enumerate(ids):
            if not matcher.accept_token(token):
                if done:
                    matcher.rollback(done)
                return 0
        for token in ids:
            scan.feed(self._tokens.output_bytes(token))
        return len(ids)

    def _probe_whitespace(self, matcher: xgr.GrammarMatcher, scan: _Scan) -> None:
        """Try a run of whitespace longer than any cap allows, where the walk now is."""
        if self.unbounded_whitespace or self._probes_left <= 0:
            return
        if self._json and (scan.in_string or (scan.data and scan.data[-1] not in _VALUE_START)):
            return
        self._probes_left -= 1
        for char in (" ", "\n"):
            if matcher.fork().accept_string(char * _WHITESPACE_RUN):
                self.unbounded_whitespace = True
                return
