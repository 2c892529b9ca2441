"""Did a rollback restore the matcher? Its state after the rollback against a copy taken before.

xgrammar's rollback has corrupted structural-tag state in production (vLLM rolls the matcher back
after every speculative draft), and a corrupted state shows only in later masks. So after every
``back``, every force at an earlier step and every draft rollback, the next mask, jump-forward
string and terminated flag are compared with those of a copy of the matcher taken before the
tokens were advanced (``fork()`` / ``deep_copy()``; never a replay from the start, which would
cost O(steps) per check). Where no copy is kept any more (a back past the last
:data:`CHECKPOINTS` steps), the reference is what the matcher answered in that state before it
advanced, as the step's record kept it (its mask and jump-forward string, and the previous
step's terminated flag): the same answers, computed when the copy would have been taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from app.engine.mask import allowed_array, new_bitmask, words_from_bytes
from app.engine.masking.base import MaskingEngine
from app.engine.records import RollbackRecord, StepRecord

__all__ = [
    "CHECKPOINTS",
    "Reference",
    "check_rollback",
    "merge",
    "reference_of_fork",
    "reference_of_record",
]

#: copies of the matcher kept, one per step, for the most recent steps (O(CHECKPOINTS) forks)
CHECKPOINTS = 8


@dataclass(frozen=True, slots=True)
class Reference:
    """A state's answers before the tokens were advanced: its mask, jump-forward, terminated."""

    allowed: np.ndarray
    jump_forward: str
    terminated: bool


def reference_of_fork(copy: MaskingEngine, vocab_size: int) -> Reference:
    """The answers of a copy of the matcher (a fork), asked now; the copy is unchanged."""
    bitmask = new_bitmask(vocab_size)
    copy.fill_next_token_bitmask(bitmask)
    return Reference(
        allowed=allowed_array(bitmask[0], vocab_size),
        jump_forward=copy.find_jump_forward_string(),
        terminated=copy.is_terminated(),
    )


def reference_of_record(record: StepRecord, previous: StepRecord | None) -> Reference:
    """The answers the matcher gave in ``record``'s state before it advanced (see the module)."""
    words = torch.from_numpy(words_from_bytes(record.bitmask).copy())
    return Reference(
        allowed=allowed_array(words, record.vocab_size),
        jump_forward=record.jump_forward,
        terminated=previous.terminated if previous is not None else False,
    )


def check_rollback(
    allowed: np.ndarray, jump_forward: str, terminated: bool, reference: Reference
) -> RollbackRecord:
    """The live matcher's answers after a rollback (its mask as one bool per id, its
    jump-forward string and terminated flag) against ``reference``'s."""
    differs = np.flatnonzero(allowed != reference.allowed)
    return RollbackRecord(
        checked=True,
        differs=tuple(int(i) for i in differs),
        jump_forward_differs=jump_forward != reference.jump_forward,
        terminated_differs=terminated != reference.terminated,
    )


def merge(first: RollbackRecord | None, second: RollbackRecord | None) -> RollbackRecord | None:
    """One record for two rollbacks before the same step (a back, then the step's drafts)."""
    if first is None or second is None:
        return first or second
    return RollbackRecord(
        checked=first.checked and second.checked,
        differs=tuple(sorted(set(first.differs) | set(second.differs))),
        jump_forward_differs=first.jump_forward_differs or second.jump_forward_differs,
        terminated_differs=first.terminated_differs or second.terminated_differs,
    )
