"""The mask in words: allowed ids when few, and the token classes a mask blocks entirely."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.mask_summary import LIST_MAX, summarize_mask
from app.engine.tokens import Tokens

VOCAB = [b"a", b"b", b'"', b'a"', b"\\n", b"\n", b"  ", b"\xe2\x82", b"abcdef", b"</s>"]


def _tokens() -> Tokens:
    return Tokens(tokenizer=None, info=None, vocab_size=len(VOCAB), token_bytes=tuple(VOCAB),
                  stop_ids=frozenset({9}), special_ids=frozenset({9}))  # fmt: skip


def _mask(allowed: list[int], size: int = len(VOCAB)) -> bytes:
    bits = np.zeros(32 * ((size + 31) // 32), dtype=np.uint8)
    bits[allowed] = 1
    return np.packbits(bits, bitorder="little").view("<i4").tobytes()


@pytest.mark.parametrize(
    ("allowed", "blocked_labels"),
    [
        ([0, 1], {'containing a double quote "', "containing a backslash \\",
                  "containing a line break (\\n or \\r)", "made of whitespace only",
                  "holding part of a UTF-8 character", "special (end of text, chat markers)",
                  "longer than 1 characters"}),
        ([0, 1, 3, 8], {"containing a backslash \\", "containing a line break (\\n or \\r)",
                        "made of whitespace only", "holding part of a UTF-8 character",
                        "special (end of text, chat markers)"}),
        ([5, 9], {'containing a double quote "', "containing a backslash \\",
                  "holding part of a UTF-8 character", "longer than 1 characters"}),
    ],
)  # fmt: skip
def test_the_classes_named_are_exactly_those_blocked_entirely(
    allowed: list[int], blocked_labels: set[str]
) -> None:
    summary = summarize_mask(_mask(allowed), _tokens())
    assert summary.allowed_count == len(allowed)
    assert summary.allowed_ids == tuple(allowed)
    assert {c.label for c in summary.blocked_classes} == blocked_labels
    for c in summary.blocked_classes:  # every member of a named class is blocked
        assert c.count >= 1


def test_a_large_mask_lists_no_ids() -> None:
    size = LIST_MAX + 50
    vocab = [b"x%d" % i for i in range(size)]
    tokens = Tokens(tokenizer=None, info=None, vocab_size=size, token_bytes=tuple(vocab),
                    stop_ids=frozenset(), special_ids=frozenset())  # fmt: skip
    summary = summarize_mask(_mask(list(range(LIST_MAX + 1)), size), tokens)
    assert summary.allowed_count == LIST_MAX + 1
    assert summary.allowed_ids is None


def test_an_empty_mask_names_no_class() -> None:
    summary = summarize_mask(_mask([]), _tokens())
    assert summary.allowed_count == 0
    assert summary.blocked_classes == ()
