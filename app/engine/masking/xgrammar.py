"""The xgrammar masking engine: a ``GrammarMatcher`` behind the :class:`MaskingEngine` seam.

xgrammar's ``find_jump_forward_string`` has no bound: where the grammar forces an endless text
(``root ::= "a" root``) it never returns, and its memory grows by hundreds of MB a second. So it
is asked only once the forced text is known to be short: at once while the mask allows more
tokens than the longest token has bytes (each allowed token would otherwise be a prefix of the
forced text, one per length), else after a walk on a copy, a whole token a mask, shows it ends
within :data:`JUMP_FORWARD_CAP` bytes. A longer forced text is cut there (walked a byte a mask),
as llguidance cuts its own."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch
import xgrammar as xgr

from app.engine.budget import checkpoint, uncharged
from app.engine.grammars.spec import CompileResult
from app.engine.mask import count_allowed, new_bitmask
from app.engine.masking.parser_state import active_rules

__all__ = ["JUMP_FORWARD_CAP", "XGrammarMasking"]

#: The most bytes of a jump-forward string (llguidance stops its own near 25,000 characters).
JUMP_FORWARD_CAP = 4096
#: More allowed tokens than any vocabulary's longest token has bytes: the forced text is short.
_MANY = 4096


class _Vocabulary:
    """What the bounded jump-forward reads of a compiled grammar's vocabulary."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        info = compiled.tokenizer_info
        decoded = info.decoded_vocab
        self.size = info.vocab_size
        missing = max(0, self.size - len(decoded))
        lengths = np.fromiter(map(len, decoded), dtype=np.int32, count=len(decoded))
        self.lengths = np.pad(lengths, (0, missing))
        self.longest = int(self.lengths.max(initial=0))
        heads = np.frombuffer(b"".join(token[:1] or b"\0" for token in decoded), dtype=np.uint8)
        #: the first byte of each token, -1 for a token with no bytes
        self.first = np.where(lengths > 0, heads.astype(np.int16), -1)
        self.first = np.pad(self.first, (0, missing), constant_values=-1)
        self.stops = np.array(sorted(set(info.stop_token_ids)), dtype=np.int64)


# By the compiled grammar's identity (some compiled grammars are not hashable), while it lives.
_VOCABULARIES: dict[int, _Vocabulary] = {}
_VOCABULARIES_LOCK = threading.Lock()


def _vocabulary(compiled: xgr.CompiledGrammar) -> _Vocabulary:
    vocabulary = _VOCABULARIES.get(id(compiled))
    if vocabulary is None:
        with uncharged():  # once per grammar, the same for every grammar: not this walk's cost
            vocabulary = _Vocabulary(compiled)
        with _VOCABULARIES_LOCK:
            if id(compiled) not in _VOCABULARIES:
                weakref.finalize(compiled, _VOCABULARIES.pop, id(compiled), None)
            _VOCABULARIES[id(compiled)] = vocabulary
    return vocabulary


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
        # The mask last filled in the current state (None once the state moved): the first
        # question of the bounded jump-forward.
        self._filled: torch.Tensor | None = None

    def fork(self) -> XGrammarMasking:
        """See :meth:`MaskingEngine.fork`: ``GrammarMatcher.fork()``."""
        copy = XGrammarMasking(self._grammar, matcher=self._matcher.fork())
        copy._filled = self._filled  # the same state's mask (never written to)
        return copy

    def fill_next_token_bitmask(self, bitmask: torch.Tensor) -> None:
        """See :meth:`MaskingEngine.fill_next_token_bitmask`."""
        checkpoint()
        if self._matcher.is_terminated():
            bitmask[0].zero_()
        else:
            self._matcher.fill_next_token_bitmask(bitmask)
        self._filled = bitmask[0].clone()

    def accept_token(self, token_id: int) -> bool:
        """See :meth:`MaskingEngine.accept_token`."""
        checkpoint()
        self._filled = None
        return bool(self._matcher.accept_token(token_id))

    def probe_token(self, token_id: int) -> bool:
        """See :meth:`MaskingEngine.probe_token`.

        In xgrammar 0.2.9 a refused token leaves the matcher untouched, so only an accepted one
        is rolled back (rolling back after a refusal would undo the previous, real token).
        """
        checkpoint()
        if not self._matcher.accept_token(token_id):
            return False
        self._matcher.rollback(1)
        return True

    def accepts_bytes(self, data: bytes) -> bool:
        """See :meth:`MaskingEngine.accepts_bytes`."""
        checkpoint()
        return bool(self._matcher.fork().accept_string(data))

    def accept_bytes(self, data: bytes) -> int:
        """See :meth:`MaskingEngine.accept_bytes`: one ``accept_string``, one rollback step."""
        checkpoint()
        if not self._matcher.fork().accept_string(data):  # a refusal must leave no trace
            return 0
        self._filled = None
        return 1 if self._matcher.accept_string(data) else 0

    def rollback(self, n: int) -> None:
        """See :meth:`MaskingEngine.rollback`."""
        if n:
            self._filled = None
            self._matcher.rollback(n)

    def find_jump_forward_string(self) -> str:
        """See :meth:`MaskingEngine.find_jump_forward_string`: xgrammar's, once it is known to
        end soon; a forced text of more than :data:`JUMP_FORWARD_CAP` bytes is cut there."""
        checkpoint()
        if self._matcher.is_terminated():
            return ""
        words = self._filled
        if words is None:  # asked of a state whose mask was not filled (a checkpoint's copy)
            scratch = new_bitmask(self._grammar.compiled.tokenizer_info.vocab_size)
            self.fill_next_token_bitmask(scratch)
            words = scratch[0]
        if count_allowed(words, words.numel() * 32) > _MANY:  # no vocabulary is read
            return str(self._matcher.find_jump_forward_string())
        vocabulary = _vocabulary(self._grammar.compiled)
        if _forced_is_short(self._matcher, words, vocabulary):
            return str(self._matcher.find_jump_forward_string())
        return _forced_bytes(self._matcher, words, vocabulary).decode("utf-8", errors="ignore")

    def is_terminated(self) -> bool:
        """See :meth:`MaskingEngine.is_terminated`."""
        return bool(self._matcher.is_terminated())

    def is_completed(self) -> bool:
        """See :meth:`MaskingEngine.is_completed`."""
        return bool(self._matcher.is_completed())

    def active_rules(self) -> list[str]:
        """See :meth:`MaskingEngine.active_rules` (read from xgrammar's debug dump)."""
        checkpoint()  # the dump grows with the parser's state: as costly as a mask, at worst
        return active_rules(self._matcher, self._rule_names)


def _allowed_ids(words: torch.Tensor, size: int) -> np.ndarray:
    """The token ids a mask allows, for a mask that allows few (read from its nonzero words)."""
    bits = words.numpy().view(np.uint32)
    nonzero = np.flatnonzero(bits)
    unpacked = np.unpackbits(bits[nonzero].view(np.uint8), bitorder="little").reshape(-1, 32)
    rows, columns = np.nonzero(unpacked)
    ids = nonzero[rows] * 32 + columns
    return ids[ids < size]


def _choice(words: torch.Tensor, vocabulary: _Vocabulary) -> int | None:
    """The longest token the mask ``words`` allows when they all start with one byte and no
    stop token is allowed (the next byte is then forced); None when the text may end or go
    on in more than one way here."""
    ids = _allowed_ids(words, vocabulary.size)
    if ids.size == 0 or np.isin(ids, vocabulary.stops).any():
        return None
    firsts = vocabulary.first[ids]
    if firsts[0] < 0 or (firsts != firsts[0]).any():
        return None
    return int(ids[np.argmax(vocabulary.lengths[ids])])


def _forced_is_short(
    matcher: xgr.GrammarMatcher, words: torch.Tensor, vocabulary: _Vocabulary
) -> bool:
    """Whether the text forced from ``matcher``'s state (whose mask is ``words``) is shorter than
    :data:`JUMP_FORWARD_CAP`, walked on a copy a whole token a mask.

    The walk W takes the longest allowed token while the next byte is forced. Every
    continuation starts with the forced text F and W is one, so F is at most W and what is
    forced after it: nothing where the text may end or branch, less than the longest token
    where the mask allows more tokens than that (each allowed token would otherwise be a
    prefix of it, one per length)."""
    walker: xgr.GrammarMatcher | None = None
    scratch = new_bitmask(vocabulary.size)
    walked = 0
    while walked + vocabulary.longest < JUMP_FORWARD_CAP:
        if count_allowed(words, vocabulary.size) > vocabulary.longest:
            return True
        token = _choice(words, vocabulary)
        if token is None:
            return True
        walker = walker or matcher.fork()
        if not walker.accept_token(token):
            return True  # refused after all (a library quirk): not forced past here either
        walked += int(vocabulary.lengths[token])
        checkpoint()  # a mask a token: a costly grammar stops at the walk's budget
        walker.fill_next_token_bitmask(scratch)
        words = scratch[0]
    return False


def _forced_bytes(
    matcher: xgr.GrammarMatcher, words: torch.Tensor, vocabulary: _Vocabulary
) -> bytes:
    """The first :data:`JUMP_FORWARD_CAP` bytes of a forced text that may be longer, walked a
    byte a mask (every byte is a token of its own in the vocabularies served, so a byte every
    allowed token starts with is a byte the grammar forces)."""
    walker = matcher.fork()
    scratch = new_bitmask(vocabulary.size)
    forced = bytearray()
    while len(forced) < JUMP_FORWARD_CAP:
        token = _choice(words, vocabulary)
        if token is None:
            break
        byte = int(vocabulary.first[token])
        if not walker.accept_string(bytes([byte])):
            break
        forced.append(byte)
        checkpoint()
        walker.fill_next_token_bitmask(scratch)
        words = scratch[0]
    return bytes(forced)
