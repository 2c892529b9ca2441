"""What the stepper and replay need from a masking engine, whichever library computes the mask."""

from __future__ import annotations

from typing import Protocol

import torch

__all__ = ["MaskingEngine"]


class MaskingEngine(Protocol):
    """One grammar's matcher state, advanced token by token.

    The bitmask layout is xgrammar's (and llguidance's): one bit per token id, 32 ids per int32
    word, little-endian within the word, in a ``(1, ceil(vocab_size / 32))`` int32 CPU tensor.
    """

    #: the library's name as step records report it ("xgrammar", "llguidance")
    name: str

    def fill_next_token_bitmask(self, bitmask: torch.Tensor) -> None:
        """Write the tokens allowed in the current state into row 0 of ``bitmask``.

        A terminated matcher allows nothing.
        """
        ...

    def accept_token(self, token_id: int) -> bool:
        """Advance by ``token_id``; False (and no change) when the grammar refuses it.

        Atomic: when it raises, the state is unchanged (the stepper rolls back only a token
        this method reported accepted).
        """
        ...

    def probe_token(self, token_id: int) -> bool:
        """Whether :meth:`accept_token` would take ``token_id`` here; the state is unchanged."""
        ...

    def accepts_bytes(self, data: bytes) -> bool:
        """Whether the grammar takes the raw bytes ``data`` here; the state is unchanged."""
        ...

    def accept_bytes(self, data: bytes) -> int:
        """Advance by the raw bytes ``data`` (the content after a reasoning end marker, inside
        the token that completes it): the matcher steps it took (what :meth:`rollback` undoes),
        0 (and no change) when the grammar refuses them."""
        ...

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens."""
        ...

    def find_jump_forward_string(self) -> str:
        """The text the grammar forces next in the current state ("" when there is a choice)."""
        ...

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted after a complete sentence."""
        ...

    def is_completed(self) -> bool:
        """Whether the text accepted so far is a complete sentence of the grammar."""
        ...

    def active_rules(self) -> list[str]:
        """Names of the grammar rules active in the current state, outermost first."""
        ...

    def fork(self) -> MaskingEngine:
        """An independent copy of this matcher in its current state (xgrammar's ``fork()``,
        llguidance's ``deep_copy()``): what one does to the copy leaves this one as it is."""
        ...
