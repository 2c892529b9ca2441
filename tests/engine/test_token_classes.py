"""The allowed-token classes of a mask: one count behind a record's ``classes`` and the
inspector's ``blocked_classes``, from the bools or straight from the packed words."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.mask_summary import (
    CLASS_KEYS,
    CLASS_LABELS,
    class_counts,
    count_classes,
    summarize_mask,
)
from app.engine.tokens import Tokens

VOCAB = [b" a", b"12", b'"', b'a"', b"\n", b"  ", b"7x", b"\xe2\x82", b"</s>", b" 3"]


def _tokens() -> Tokens:
    return Tokens(tokenizer=None, info=None, vocab_size=len(VOCAB), token_bytes=tuple(VOCAB),
                  stop_ids=frozenset({8}), special_ids=frozenset({8}))  # fmt: skip


@pytest.mark.parametrize(
    ("allowed", "expected"),
    [
        (range(10), {"whitespace_leading": 4, "digit": 1,
                     "quote": 1, "whitespace": 2,
                     "stop": 1, "contains_quote": 2}),
        ([1, 6], {"digit": 1, "whitespace_leading": 0}),
        ([8], {"stop": 1, "special": 1,
               "whitespace": 0}),
    ],
)  # fmt: skip
def test_the_counts_packed_and_unpacked_agree_and_are_the_classes_sizes(
    allowed: list[int], expected: dict[str, int]
) -> None:
    bools = np.zeros(len(VOCAB), dtype=bool)
    bools[list(allowed)] = True
    words = np.packbits(np.pad(bools, (0, 32 - len(VOCAB))), bitorder="little").view("<i4")
    counts = count_classes(bools, _tokens())
    assert list(counts) == list(CLASS_KEYS)
    assert class_counts(words, _tokens()) == counts
    assert {label: counts[label] for label in expected} == expected
    # the inspector names a class blocked exactly when its count is 0 (and it has members)
    summary = summarize_mask(words.tobytes(), _tokens())
    blocked = {c.label for c in summary.blocked_classes} - {
        f"longer than {summary.longest_allowed} characters"
    }
    by_label = {CLASS_LABELS[key]: count for key, count in counts.items()}
    assert all(by_label[label] == 0 for label in blocked)
