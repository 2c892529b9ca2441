"""What one bitmask allows and blocks, in words: the allowed ids when few, else blocked classes.

A token's id says nothing about its meaning, so the bitmask picture alone cannot tell a user why
35,887 tokens are allowed or which 2 are. This module reads the mask against the tokens' bytes:
a small allowed set is listed; for a large one, each class of tokens (containing ``"``, a
backslash, a line break...) that the mask blocks *entirely* is named with its size. These are
facts about this mask, computed, not reasons guessed from the schema.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine.mask import words_from_bytes
from app.engine.tokens import Tokens

__all__ = [
    "BlockedClass",
    "BARE_QUOTE",
    "CLASS_KEYS",
    "CLASS_LABELS",
    "DIGITS",
    "LEADING",
    "MaskSummary",
    "STOP",
    "WHITESPACE",
    "class_counts",
    "count_classes",
    "only",
    "run_of",
    "summarize_mask",
]

#: At most this many allowed tokens, the summary lists them all.
LIST_MAX = 100

QUOTE = "contains_quote"
WHITESPACE = "whitespace"
SPECIAL = "special"
LEADING = "whitespace_leading"
DIGITS = "digit"
BARE_QUOTE = "quote"
STOP = "stop"
#: Every class a record's ``classes`` counts, by its key there (the API's), with the words the
#: inspector uses for it, in this order. The first seven are the ones the inspector names when a
#: mask blocks them entirely (``blocked_classes``).
CLASS_LABELS: dict[str, str] = {
    QUOTE: 'containing a double quote "',
    "backslash": "containing a backslash \\",
    "line_break": "containing a line break (\\n or \\r)",
    "control": "containing another control character (U+0000 to U+001F)",
    WHITESPACE: "made of whitespace only",
    "partial_utf8": "holding part of a UTF-8 character",
    SPECIAL: "special (end of text, chat markers)",
    LEADING: "starting with whitespace",
    DIGITS: "made of digits only",
    BARE_QUOTE: 'exactly a double quote "',
    STOP: "stop tokens (end generation)",
}
CLASS_KEYS = tuple(CLASS_LABELS)
_NAMED_WHEN_BLOCKED = frozenset(CLASS_KEYS[:7])


@dataclass(frozen=True, slots=True)
class BlockedClass:
    """A class of tokens every member of which the mask blocks."""

    label: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"label": self.label, "count": self.count}


@dataclass(frozen=True, slots=True)
class MaskSummary:
    """One mask in words.

    Attributes:
        allowed_count: tokens the mask allows.
        vocab_size: the bitmask's width.
        allowed_ids: every allowed id (ascending) when at most ``LIST_MAX``, else ``None``.
        blocked_classes: the token classes the mask blocks entirely, largest first (they overlap).
        longest_allowed: the most characters in one allowed (non-special) token.
    """

    allowed_count: int
    vocab_size: int
    allowed_ids: tuple[int, ...] | None
    blocked_classes: tuple[BlockedClass, ...]
    longest_allowed: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "allowed_count": self.allowed_count,
            "vocab_size": self.vocab_size,
            "allowed_ids": list(self.allowed_ids) if self.allowed_ids is not None else None,
            "blocked_classes": [c.to_dict() for c in self.blocked_classes],
            "longest_allowed": self.longest_allowed,
        }


@dataclass(frozen=True, slots=True)
class _Features:
    """Per-token facts, computed once per vocabulary."""

    classes: tuple[tuple[str, np.ndarray], ...]
    matrix: np.ndarray  # (classes, vocab) bools, the rows of ``classes`` in its order
    packed: np.ndarray  # the same rows as bitmask words (uint32, little-endian bit order)
    length: np.ndarray  # characters per token; -1 for special tokens
    special: np.ndarray


#: Each tokenizer's features by its identity, while it lives (a strong reference here kept
#: every tokenizer a process ever opened, its vocabulary with it).
_FEATURES: dict[int, _Features] = {}


def _features(tokens: Tokens) -> _Features:
    cached = _FEATURES.get(id(tokens))
    if cached is not None:
        return cached
    n = tokens.vocab_size
    special = np.zeros(n, dtype=bool)
    special[list(tokens.special_ids)] = True
    data = tokens.token_bytes
    quote = np.fromiter((b'"' in b for b in data), dtype=bool, count=n)
    backslash = np.fromiter((b"\\" in b for b in data), dtype=bool, count=n)
    newline = np.fromiter((b"\n" in b or b"\r" in b for b in data), dtype=bool, count=n)
    control = np.fromiter(
        (any(c < 0x20 and c not in (0x0A, 0x0D) for c in b) for b in data), dtype=bool, count=n
    )
    space = np.fromiter((b != b"" and b.isspace() for b in data), dtype=bool, count=n)
    partial = np.fromiter((_partial_utf8(b) for b in data), dtype=bool, count=n)
    leading = np.fromiter((b[:1].isspace() for b in data), dtype=bool, count=n)
    digits = np.fromiter((b.isdigit() for b in data), dtype=bool, count=n)
    bare = np.fromiter((b == b'"' for b in data), dtype=bool, count=n)
    stop = np.zeros(n, dtype=bool)
    stop[[i for i in tokens.stop_ids if 0 <= i < n]] = True
    length = np.fromiter((len(b.decode("utf-8", "replace")) for b in data), dtype=np.int32, count=n)
    length[special] = -1
    regular = ~special
    rows = (quote, backslash, newline, control, space, partial)
    members = [row & regular for row in rows] + [special]
    members += [leading & regular, digits & regular, bare & regular, stop]
    features = _Features(
        classes=tuple(zip(CLASS_KEYS, members, strict=True)),
        matrix=np.stack(members),
        packed=_pack(np.stack(members)),
        length=length,
        special=special,
    )
    if id(tokens) not in _FEATURES:
        weakref.finalize(tokens, _FEATURES.pop, id(tokens), None)
    _FEATURES[id(tokens)] = features
    return features


def _partial_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def summarize_mask(bitmask: bytes, tokens: Tokens) -> MaskSummary:
    """The allowed ids (when few) and the token classes ``bitmask`` blocks entirely.

    Args:
        bitmask: the packed little-endian int32 words, as a step record holds them.
        tokens: the vocabulary the mask was filled for.
    """
    n = tokens.vocab_size
    words = words_from_bytes(bitmask)
    allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:n].view(np.bool_)
    features = _features(tokens)
    count = int(allowed.sum())
    allowed_ids = tuple(int(i) for i in np.flatnonzero(allowed)) if count <= LIST_MAX else None
    lengths = features.length[allowed & ~features.special]
    longest = int(lengths.max()) if lengths.size else 0
    blocked: list[BlockedClass] = []
    if count:
        sizes = features.matrix.sum(axis=1)
        for (key, _), size, inside in zip(
            features.classes, sizes, _counts(features, allowed), strict=True
        ):
            if key in _NAMED_WHEN_BLOCKED and size and not inside:
                blocked.append(BlockedClass(CLASS_LABELS[key], int(size)))
        longer = features.length > longest
        size = int(longer.sum())
        if lengths.size and size:
            blocked.append(BlockedClass(f"longer than {longest} characters", size))
    blocked.sort(key=lambda c: -c.count)
    return MaskSummary(
        allowed_count=count,
        vocab_size=n,
        allowed_ids=allowed_ids,
        blocked_classes=tuple(blocked),
        longest_allowed=longest,
    )


def _pack(rows: np.ndarray) -> np.ndarray:
    """Bool rows as bitmask words: bit ``i % 32`` of word ``i // 32`` is token ``i``."""
    width = (rows.shape[1] + 31) // 32 * 32
    padded = np.zeros((rows.shape[0], width), dtype=bool)
    padded[:, : rows.shape[1]] = rows
    return np.packbits(padded, axis=1, bitorder="little").view("<u4")


def _counts(features: _Features, allowed: np.ndarray) -> np.ndarray:
    return _counts_packed(features, _pack(allowed[np.newaxis, :])[0])


def _counts_packed(features: _Features, words: np.ndarray) -> np.ndarray:
    # a popcount of the words: about 40 times cheaper than counting the unpacked bools
    width = features.packed.shape[1]
    counts: np.ndarray = np.bitwise_count(features.packed & words[:width]).sum(axis=1)
    return counts


def count_classes(allowed: np.ndarray, tokens: Tokens) -> dict[str, int]:
    """How many tokens of each class of :data:`CLASS_KEYS` ``allowed`` allows: the one count
    behind both a record's ``classes`` and the inspector's ``blocked_classes``.

    Args:
        allowed: one bool per token of ``tokens`` (the mask unpacked).
        tokens: the vocabulary.
    """
    counts = _counts(_features(tokens), allowed[: tokens.vocab_size])
    return {key: int(c) for key, c in zip(CLASS_KEYS, counts, strict=True)}


def class_counts(words: np.ndarray, tokens: Tokens) -> dict[str, int]:
    """:func:`count_classes` of one row of bitmask words (int32 or uint32, as a masking engine
    fills them), without unpacking them."""
    counts = _counts_packed(_features(tokens), words.view("<u4"))
    return {key: int(c) for key, c in zip(CLASS_KEYS, counts, strict=True)}


def only(record: Any, label: str) -> bool:
    """Whether every token ``record`` allowed is of class ``label`` (and one is allowed).

    ``record`` is a step or replay record, or its JSON form: anything with ``classes`` and
    ``allowed_count``. A record without ``classes`` (an unmasked step) is never "only".
    """
    if isinstance(record, dict):
        classes, allowed = record.get("classes"), record.get("allowed_count")
    else:
        classes, allowed = getattr(record, "classes", None), getattr(record, "allowed_count", 0)
    return bool(allowed) and isinstance(classes, dict) and classes.get(label) == allowed


def run_of(records: Any, label: str) -> list[int]:
    """For each record, how many records in a row up to and including it allowed only class
    ``label``: ``run_of(steps, WHITESPACE)[i] >= k`` is the "whitespace only for k steps" mark
    at step ``i``, computed from the records alone."""
    runs: list[int] = []
    for record in records:
        runs.append(runs[-1] + 1 if runs and only(record, label) else int(only(record, label)))
    return runs
