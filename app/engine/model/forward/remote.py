"""A vLLM server as a forward engine: the raw distribution comes from it, the mask from here.

Each step asks the server for the raw next-token log-probabilities of the prefix (token ids, so
the server sees exactly the tokens the mask was computed for): the whole vocabulary when its
``--max-logprobs`` allows it, else its top-K. The token is chosen here from the masked
distribution when that is enough (the whole vocabulary; or greedy, with an allowed token in the
top-K); otherwise a second request with ``allowed_token_ids`` (the mask computed here, so the mask
shown is the mask applied) lets the server draw among the allowed tokens only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
import xgrammar as xgr

from app.engine.mask import allowed_array
from app.engine.model.forward.base import RawDistribution
from app.engine.model.remote.client import ALL_TOKENS, VllmClient
from app.engine.model.sampling import SamplingParams, choose_token, step_seed

__all__ = ["RemoteForward"]


class RemoteForward:
    """A session's prefix as token ids, continued by a vLLM server.

    The server keeps no per-session state (its prefix cache makes each step cost about one
    token of prefill), so going back only shortens the list, and a failed request leaves
    nothing to undo.

    Args:
        client: the server's client (shared by every session on it).
        prompt_ids: the rendered prompt's token ids.
        vocab_size: the width of the model's logits.
        logprobs_cap: the most logprobs one request may return; None: the whole vocabulary.
    """

    def __init__(
        self,
        client: VllmClient,
        prompt_ids: Sequence[int],
        *,
        vocab_size: int,
        logprobs_cap: int | None,
    ) -> None:
        self._client = client
        self._prompt_len = len(prompt_ids)
        self._prefix = list(prompt_ids)
        self._vocab_size = vocab_size
        self._count = ALL_TOKENS if logprobs_cap is None else logprobs_cap
        # (token, raw logprob, request ms) that the last choice request taught.
        self._learnt: tuple[int, float, float] | None = None

    def distribution(self) -> RawDistribution:
        """See :meth:`ForwardEngine.distribution`: one request, raw logprobs."""
        self._learnt = None
        answer = self._client.next_logprobs(self._prefix, count=self._count)
        if answer.complete:
            # Log-probabilities are logits up to a constant: the same softmax, the same draw.
            logits = torch.full((self._vocab_size,), -torch.inf, dtype=torch.float32)
            logits[torch.from_numpy(answer.token_ids)] = torch.from_numpy(answer.logprobs).float()
            return RawDistribution(answer.request_ms, logits=logits, logits_known=False)
        pairs = tuple(zip(answer.token_ids.tolist(), answer.logprobs.tolist(), strict=True))
        return RawDistribution(answer.request_ms, top_logprobs=pairs, logits_known=False)

    def choose(
        self, raw: RawDistribution, bitmask: torch.Tensor, sampling: SamplingParams, *, index: int
    ) -> int:
        """See :meth:`ForwardEngine.choose`: here when the raw data suffices, else the server
        draws among the allowed tokens (with the step's own seed)."""
        if raw.logits is not None:
            masked = raw.logits.unsqueeze(0).clone()
            xgr.apply_token_bitmask_inplace(masked, bitmask)
            return choose_token(masked[0], sampling, index)
        allowed = allowed_array(bitmask[0], self._vocab_size)
        if sampling.greedy:
            # The top-K holds the K most probable tokens: its best allowed one is the best.
            best = next((i for i, _ in raw.top_logprobs if allowed[i]), None)
            if best is not None:
                return best
        choice = self._client.choose(
            self._prefix,
            allowed_ids=np.flatnonzero(allowed).tolist(),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=step_seed(sampling.seed, index),
        )
        self._learnt = (choice.token_id, choice.logprob, choice.request_ms)
        return choice.token_id

    def with_token(self, raw: RawDistribution, token_id: int) -> RawDistribution:
        """See :meth:`ForwardEngine.with_token`: a token outside the top-K is learnt from the
        choice request, or (forced) from one more request allowing it alone; either request's
        time counts in ``forward_ms``."""
        known = raw.logits is not None or any(i == token_id for i, _ in raw.top_logprobs)
        learnt, self._learnt = self._learnt, None
        if learnt is not None and learnt[0] == token_id:
            _, logprob, spent_ms = learnt
        elif known:
            return raw
        else:
            only = self._client.choose(
                self._prefix, allowed_ids=[token_id], temperature=0.0, top_p=1.0, seed=0
            )
            logprob, spent_ms = only.logprob, only.request_ms
        extra = () if known else ((token_id, logprob),)
        return dataclasses.replace(raw, forward_ms=raw.forward_ms + spent_ms, extra_logprobs=extra)

    def extend(self, token_id: int) -> None:
        """See :meth:`ForwardEngine.extend`."""
        self._prefix.append(token_id)

    def truncate(self, generated: int) -> None:
        """See :meth:`ForwardEngine.truncate`."""
        del self._prefix[self._prompt_len + generated :]

    @property
    def memory_bytes(self) -> int:
        """See :meth:`ForwardEngine.memory_bytes`: none here, the KV cache is the server's."""
        return 0
