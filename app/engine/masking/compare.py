"""Compare mode: a second masking engine follows the tokens the driving engine's session takes.

The follower is another instance of the masking seam, in the same state as the driver (it has
taken the same tokens). At each step it computes its own mask in that state and says where the
two masks, jump-forward strings and terminations differ (:meth:`Follower.compare`), then takes
the driver's token (:meth:`Follower.follow`). When the driver takes a token the follower
refuses, the follower ends there (the token is never given to it, so going back past that step
revives it) and the run goes on under the driver alone.

Not every mask difference is a difference of language: llguidance's mask leaves out
non-canonical spellings of forced text that its ``consume_token`` still takes. A differing token
that the engine whose mask blocks it would still accept is counted in ``mask_only``, and does
not make the step diverge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np
import torch

from app.engine.mask import allowed_array, new_bitmask
from app.engine.masking.base import MaskingEngine
from app.engine.records import FollowerRecord, StepRecord, TopDifference
from app.engine.tokens import Tokens

__all__ = ["TOP_DIFFERENCES", "Follower"]

#: how many of the tokens the two masks disagree on are listed per step, most probable first
TOP_DIFFERENCES = 8


class Follower:
    """A masking engine that takes the driver's tokens and compares masks step by step.

    Args:
        masking: the following engine, in the grammar's start state.
        tokens: the model's tokenizer (texts of the differing tokens).
    """

    def __init__(self, masking: MaskingEngine, tokens: Tokens) -> None:
        self.masking = masking
        self._tokens = tokens
        self._bitmask = new_bitmask(tokens.vocab_size)
        self._accepted: list[bool] = []
        self._ended: tuple[int, str] | None = None

    @property
    def engine(self) -> str:
        """The follower's library."""
        return self.masking.name

    def compare(
        self,
        driver_words: torch.Tensor,
        probs: torch.Tensor | Mapping[int, float],
        driver_accepts: Callable[[int], bool],
    ) -> FollowerRecord | None:
        """The follower's mask against the driver's, both in the state before this step's token
        (None once the follower has ended); :meth:`follow` fills in what comes after the token.

        Args:
            driver_words: the driver's bitmask row for the step.
            probs: the raw distribution of the step (to rank the differing tokens), or the
                probabilities known of it (a remote top-K: only known tokens are ranked, and
                every other token is less probable than the top-K's).
            driver_accepts: the driver's ``probe_token`` in that state.
        """
        if self._ended is not None:
            return None
        self.masking.fill_next_token_bitmask(self._bitmask)
        vocab = self._tokens.vocab_size
        mine = allowed_array(self._bitmask[0], vocab)
        theirs = allowed_array(driver_words, vocab)
        only_driver = np.flatnonzero(theirs & ~mine)
        only_follower = np.flatnonzero(mine & ~theirs)
        mask_only = sum(self.masking.probe_token(int(t)) for t in only_driver)
        mask_only += sum(driver_accepts(int(t)) for t in only_follower)
        return FollowerRecord(
            engine=self.engine,
            allowed_count=int(mine.sum()),
            only_driver=len(only_driver),
            only_follower=len(only_follower),
            mask_only=mask_only,
            top_differences=self._top(np.concatenate([only_driver, only_follower]), theirs, probs),
            jump_forward=self.masking.find_jump_forward_string(),
            terminated=False,
            refused=None,
            ended_at=None,
            diverged=False,
        )

    def follow(self, record: StepRecord, comparison: FollowerRecord | None) -> FollowerRecord:
        """Take the token the driver took at ``record``'s step (unless the follower refuses it:
        then it ends here), and say how the step compared."""
        if comparison is None or self._ended is not None:
            self._accepted.append(False)
            return self._ended_record()
        accepted = self.masking.accept_token(record.token_id)
        self._accepted.append(accepted)
        refused = None if accepted else self._refusal(record, comparison.allowed_count)
        if refused is not None:
            self._ended = (record.index, refused)
        terminated = self.masking.is_terminated()
        differs = comparison.only_driver + comparison.only_follower - comparison.mask_only
        return dataclasses.replace(
            comparison,
            terminated=terminated,
            refused=refused,
            ended_at=record.index if refused is not None else None,
            diverged=differs > 0
            or comparison.jump_forward != record.jump_forward
            or terminated != record.terminated
            or refused is not None,
        )

    def undo(self) -> None:
        """Forget the last :meth:`follow` (a step that failed after it)."""
        self.truncate(len(self._accepted) - 1)

    def truncate(self, steps: int) -> None:
        """Go back to the state after ``steps`` steps (the driver went back)."""
        if steps >= len(self._accepted):
            return
        self.masking.rollback(sum(self._accepted[steps:]))
        del self._accepted[steps:]
        if self._ended is not None and self._ended[0] >= steps:
            self._ended = None

    def _refusal(self, record: StepRecord, allowed: int) -> str:
        return (
            f"{self.engine} refuses {record.token_text!r} (token {record.token_id}), which "
            f"{record.engine} took at step {record.index}; {self.engine} allowed {allowed} "
            f"tokens there"
        )

    def _top(
        self, ids: np.ndarray, driver: np.ndarray, probs: torch.Tensor | Mapping[int, float]
    ) -> tuple[TopDifference, ...]:
        if not isinstance(probs, torch.Tensor):
            ids = np.array([i for i in ids.tolist() if i in probs], dtype=np.int64)
        if len(ids) == 0:
            return ()
        if isinstance(probs, torch.Tensor):
            values = probs[torch.from_numpy(ids).to(probs.device)]
        else:
            values = torch.tensor([probs[i] for i in ids.tolist()], dtype=torch.float64)
        order = torch.argsort(values, descending=True)[:TOP_DIFFERENCES].tolist()
        return tuple(
            TopDifference(
                token_id=int(ids[i]),
                text=self._tokens.text(int(ids[i])),
                prob=float(values[i]),
                driver=bool(driver[ids[i]]),
                follower=not bool(driver[ids[i]]),
            )
            for i in order
        )

    def _ended_record(self) -> FollowerRecord:
        assert self._ended is not None
        index, reason = self._ended
        return FollowerRecord(
            engine=self.engine,
            allowed_count=0,
            only_driver=0,
            only_follower=0,
            mask_only=0,
            top_differences=(),
            jump_forward="",
            terminated=False,
            refused=reason,
            ended_at=index,
            diverged=False,
        )
