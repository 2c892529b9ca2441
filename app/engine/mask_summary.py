"""What one bitmask allows and blocks, in words: the allowed ids when few, else blocked classes.

A token's id says nothing about its meaning, so the bitmask picture alone cannot tell a user why
35,887 tokens are allowed or which 2 are. This module reads the mask against the tokens' bytes:
a small allowed set is listed; for a large one, each class of tokens (containing ``"``, a
backslash, a line break...) that the mask blocks *entirely* is named with its size. These are
facts about this mask, computed, not reasons guessed from the schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine.mask import words_from_bytes
from app.engine.tokens import Tokens

__all__ = ["BlockedClass", "MaskSummary", "summarize_mask"]

#: At most this many allowed tokens, the summary lists them all.
LIST_MAX = 100


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
    length: np.ndarray  # characters per token; -1 for special tokens
    special: np.ndarray


_FEATURES: dict[int, tuple[Tokens, _Features]] = {}


def _features(tokens: Tokens) -> _Features:
    cached = _FEATURES.get(id(tokens))
    if cached is not None and cached[0] is tokens:
        return cached[1]
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
    length = np.fromiter((len(b.decode("utf-8", "replace")) for b in data), dtype=np.int32, count=n)
    length[special] = -1
    regular = ~special
    features = _Features(
        classes=(
            ('containing a double quote "', quote & regular),
            ("containing a backslash \\", backslash & regular),
            ("containing a line break (\\n or \\r)", newline & regular),
            ("containing another control character (U+0000 to U+001F)", control & regular),
            ("made of whitespace only", space & regular),
            ("holding part of a UTF-8 character", partial & regular),
            ("special (end of text, chat markers)", special),
        ),
        length=length,
        special=special,
    )
    _FEATURES[id(tokens)] = (tokens, features)
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
        for label, members in features.classes:
            size = int(members.sum())
            if size and not (members & allowed).any():
                blocked.append(BlockedClass(label, size))
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
