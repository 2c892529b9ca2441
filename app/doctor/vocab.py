"""The vocabulary sorted into the few kinds of tokens the grammar walk steers with.

A bitmask holds one bit per token id. Reading which of a small set of ids are allowed costs a few
microseconds; unpacking all 49k bits costs a few hundred, so the walk only unpacks sparse masks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from app.engine.tokens import Tokens

__all__ = ["IdSet", "Vocab", "allowed_ids", "every_allowed_id"]

_CLOSERS = frozenset(b'"]}')
_BRACKETS = frozenset(b"]}")
_OPENERS = frozenset(b"[{")
_WHITESPACE = frozenset(b" \t\n\r")
_SPARSE_WORDS = 64
_FEW_WORDS = 2


class IdSet:
    """A fixed set of token ids, in a chosen order, whose mask bits are read together."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.ids = np.fromiter(ids, dtype=np.int64)
        self._word = self.ids >> 5
        self._shift = (self.ids & 31).astype(np.uint32)

    def __len__(self) -> int:
        return len(self.ids)

    def allowed(self, words: np.ndarray) -> np.ndarray:
        """The ids of this set that the mask ``words`` (one row, uint32) allows, in order."""
        allowed: np.ndarray = self.ids[((words[self._word] >> self._shift) & 1).astype(bool)]
        return allowed


@dataclass(frozen=True)
class Vocab:
    """Token ids by kind, for one tokenizer.

    Attributes:
        size: the bitmask's vocabulary size.
        lengths: bytes of each token id (0 for special and padding ids).
        usable: ids that add text (not special, not empty).
        single: usable ids of one byte.
        string_closers: ids that end a string: ``"`` then only ``]`` and ``}``, best first
            (the most brackets closed, then the longest).
        closers: ids made only of ``]`` and ``}``, longest first.
        item_ends: the ids of ``,``, ``]`` and ``}`` alone: what ends an array item.
        commas: the ids of ``,`` alone.
        quotes: the ids of ``"`` alone.
        openers: bool per id: the token opens an object or array.
        blank: bool per id: the token is only whitespace.
        stop: the ids that end a document.
    """

    size: int
    lengths: np.ndarray
    usable: IdSet
    single: IdSet
    string_closers: IdSet
    closers: IdSet
    item_ends: IdSet
    commas: IdSet
    quotes: IdSet
    openers: np.ndarray
    blank: np.ndarray
    stop: IdSet

    @classmethod
    def of(cls, tokens: Tokens) -> Vocab:
        """Sort the vocabulary of ``tokens`` (a few hundred ms for 49k tokens)."""
        data = [
            b"" if i in tokens.special_ids else tokens.token_bytes[i]
            for i in range(tokens.vocab_size)
        ]
        lengths = np.array([len(d) for d in data], dtype=np.int32)
        usable = np.flatnonzero(lengths > 0).tolist()
        ending = [i for i in usable if data[i][:1] == b'"' and set(data[i]) <= _CLOSERS]
        brackets = [i for i in usable if set(data[i]) <= _BRACKETS]
        return cls(
            size=tokens.vocab_size,
            lengths=lengths,
            usable=IdSet(usable),
            single=IdSet(np.flatnonzero(lengths == 1)),
            string_closers=IdSet(
                sorted(ending, key=lambda i: (-len(set(data[i]) & _BRACKETS), -len(data[i]), i))
            ),
            closers=IdSet(sorted(brackets, key=lambda i: (-len(data[i]), i))),
            item_ends=IdSet(i for i in usable if data[i] in (b",", b"]", b"}")),
            commas=IdSet(i for i in usable if data[i] == b","),
            quotes=IdSet(i for i in usable if data[i] == b'"'),
            openers=np.array([bool(set(d) & _OPENERS) for d in data]),
            blank=np.array([bool(d) and set(d) <= _WHITESPACE for d in data]),
            stop=IdSet(sorted(tokens.stop_ids)),
        )


def allowed_ids(words: np.ndarray, size: int) -> np.ndarray | None:
    """Every allowed id when the mask is sparse (at most 2,048 ids), else None."""
    nonzero = np.flatnonzero(words)
    if len(nonzero) > _SPARSE_WORDS:
        return None
    if len(nonzero) <= _FEW_WORDS:  # a handful of bits: plain integers beat numpy's overhead
        found: list[int] = []
        for index in nonzero.tolist():
            word = int(words[index])
            while word:
                low = word & -word
                found.append(index * 32 + low.bit_length() - 1)
                word ^= low
        return np.array([i for i in found if i < size], dtype=np.int64)
    unpacked = np.unpackbits(words[nonzero].view(np.uint8), bitorder="little").reshape(-1, 32)
    rows, columns = np.nonzero(unpacked)
    ids = nonzero[rows] * 32 + columns
    return ids[ids < size]


def every_allowed_id(words: np.ndarray, size: int) -> np.ndarray:
    """Every allowed id, sparse mask or not."""
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:size]
    return np.flatnonzero(bits)
