"""The chip's kind: forced by the grammar, changed by the mask, or the model's own choice."""

from __future__ import annotations

import pytest

from app.engine import Probe, StepRecord, TopToken
from app.web.ui.render import ChipKind, chip_kind


def _record(text: str, allowed_count: int, jump_forward: str, top_allowed: bool) -> StepRecord:
    top = (TopToken(token_id=1, text="Low", prob=0.5, logit=1.0, allowed=top_allowed),)
    return StepRecord(
        index=0, token_id=2, token_text=text, token_bytes=text.encode(), forced=False, prob=0.3,
        rank=1, top=top, blocked_mass=0.4, allowed_count=allowed_count, vocab_size=10,
        bitmask=b"", depth=1, path="$", rules=(), jump_forward=jump_forward,
        probe=Probe(checked=1), mask_accept_agree=True, engine="xgrammar", forward_ms=0.0,
        mask_us=0.0, total_ms=0.0, terminated=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "allowed_count", "jump_forward", "top_allowed", "kind"),
    [
        ("f", 1, "", False, "forced"),  # one allowed token: no decision, whatever was preferred
        ("fact", 3, 'factors": [', False, "forced"),  # inside the jump-forward string
        ('"low', 40, "", False, "changed"),  # the model preferred a blocked token
        ('"low', 40, "", True, "free"),
        ("", 40, "", True, "free"),  # an empty text is no prefix of anything
        ("x", 2, "y", True, "free"),
    ],
)
def test_a_chip_kind_says_who_decided(
    text: str, allowed_count: int, jump_forward: str, top_allowed: bool, kind: ChipKind
) -> None:
    assert chip_kind(_record(text, allowed_count, jump_forward, top_allowed)) == kind
