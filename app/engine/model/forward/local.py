"""The local torch model as a forward engine: one KV cache per session, steps batched across
sessions (:mod:`app.engine.model.forward.batch`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch
import xgrammar as xgr
from transformers import DynamicCache

from app.engine.model.forward.base import RawDistribution
from app.engine.model.forward.batch import Batcher, GrowingLayer
from app.engine.model.sampling import SamplingParams, choose_token
from app.exceptions import InvalidInput

__all__ = ["LocalForward", "choose_under_mask"]


def choose_under_mask(
    logits: torch.Tensor, bitmask: torch.Tensor, sampling: SamplingParams, index: int
) -> int:
    """The token :func:`choose_token` picks from ``logits`` once ``bitmask`` masks them.

    Greedy decoding never masks the whole vocabulary: the raw argmax (the first index of the
    largest logit) is the masked argmax whenever its bit is set, which it is at most steps of a
    model that follows the grammar; else the allowed logits alone are searched, in numpy on the
    CPU (torch's argmax wakes its thread pool, ten times the cost at this size). Sampling, and
    logits on another device, mask a copy with xgrammar's kernel as before.

    Args:
        logits: the raw 1-D logits (left untouched: the step's checks read them later).
        bitmask: the grammar's mask (row 0, packed int32 words, on the CPU).
        sampling: greedy, or temperature/top-p with the seed.
        index: the step index, which selects the step's random draw.
    """
    words = bitmask[0]
    if sampling.greedy:
        on_cpu = logits.device.type == "cpu" and logits.dtype == torch.float32
        raw = logits.numpy() if on_cpu else None
        best = int(raw.argmax()) if raw is not None else int(torch.argmax(logits))
        if best < 32 * words.shape[0] and (int(words[best >> 5]) >> (best & 31)) & 1:
            return best
        if raw is not None:
            bits = np.unpackbits(words.numpy().view(np.uint8), bitorder="little")
            allowed = bits[: raw.shape[0]].view(np.bool_)
            if allowed.shape[0] == raw.shape[0]:
                return int(np.where(allowed, raw, np.float32(-np.inf)).argmax())
    masked = logits.unsqueeze(0).clone()
    xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device, non_blocking=True))
    return choose_token(masked[0], sampling, index)


class LocalForward:
    """The prompt and the chosen tokens, fed to a local model through a KV cache.

    The cache holds every token of the prefix but the last, which the next forward pass
    consumes (the whole prompt, for the first step). Truncating therefore crops the cache and
    re-runs the very forward pass that produced the step, so the logits repeat exactly (within
    float error when other sessions share that step's batch).

    Args:
        batcher: runs the forward passes of every session on the model (shared by them).
        prompt_ids: the rendered prompt's token ids.
    """

    def __init__(self, batcher: Batcher, prompt_ids: Sequence[int]) -> None:
        self._batcher = batcher
        self._prompt = tuple(prompt_ids)
        self._generated: list[int] = []
        self._cache = self._new_cache()
        self._pending: tuple[int, ...] = self._prompt
        # Fed by :meth:`expect`: tokens in the cache past the prefix, and the distributions of
        # the prefixes still to come (the first is the next one's when nothing is pending).
        self._expected: deque[int] = deque()
        self._ahead: deque[RawDistribution] = deque()

    def _new_cache(self) -> DynamicCache:
        return self._batcher.new_cache()

    def expect(self, token_ids: Sequence[int]) -> None:
        """Run now, in one forward pass (two for a prompt: its own, which sessions share, then
        the tokens'), the passes of the next steps if they take ``token_ids``: a trace replayed.

        Each step's :meth:`distribution` is then a row of that pass, and :meth:`extend` by the
        expected token feeds nothing; the first step that takes another token drops the rest
        (the cache is cropped to the prefix) and runs its passes as before. The logits are
        those of the one-token passes, within float error (one matrix product, not many).

        Raises:
            InvalidInput: a token id outside the model's vocabulary, or an expectation while
                one is still being followed.
        """
        if self._expected or self._ahead:
            raise InvalidInput("the forward engine already follows expected tokens")
        vocab = self._batcher.vocab_size
        if any(not 0 <= t < vocab for t in token_ids):
            raise InvalidInput(f"expected token ids must be between 0 and {vocab - 1}")
        if not token_ids:
            return
        start = time.perf_counter()
        rows: list[torch.Tensor] = []
        pending, self._pending = self._pending, ()
        try:
            if len(pending) > 1:  # a prompt: alone, so that its cache is kept for others
                rows.append(self._batcher.prefill(self._cache, pending))
                pending = ()
            rows.extend(self._batcher.feed(self._cache, pending + tuple(token_ids)).unbind(0))
        except BaseException:
            self.truncate(len(self._generated))
            raise
        share = (time.perf_counter() - start) * 1000 / len(rows)
        self._expected.extend(token_ids)
        self._ahead.extend(RawDistribution(forward_ms=share, logits=row) for row in rows)

    def distribution(self) -> RawDistribution:
        """See :meth:`ForwardEngine.distribution`: a prompt runs alone, a step in a batch (or
        its row of the pass :meth:`expect` ran)."""
        if not self._pending and self._ahead:
            return self._ahead.popleft()
        start = time.perf_counter()
        if len(self._pending) == 1:
            logits = self._batcher.step(self._cache, self._pending[0])
        else:
            logits = self._batcher.prefill(self._cache, self._pending)
        self._pending = ()
        return RawDistribution(forward_ms=(time.perf_counter() - start) * 1000, logits=logits)

    def choose(
        self, raw: RawDistribution, bitmask: torch.Tensor, sampling: SamplingParams, *, index: int
    ) -> int:
        """See :meth:`ForwardEngine.choose`: :func:`choose_under_mask`, copying no logits when
        greedy."""
        assert raw.logits is not None, "a local model gives the whole distribution"
        return choose_under_mask(raw.logits, bitmask, sampling, index)

    def with_token(self, raw: RawDistribution, token_id: int) -> RawDistribution:
        """See :meth:`ForwardEngine.with_token`: the logits hold every token."""
        return raw

    def extend(self, token_id: int) -> None:
        """See :meth:`ForwardEngine.extend`."""
        self._generated.append(token_id)
        if self._expected and self._expected[0] == token_id and self._ahead:
            self._expected.popleft()  # in the cache already; its distribution is next
            return
        if self._expected:  # another token: what was fed past it is dropped
            self.truncate(len(self._generated))
            return
        self._pending = (token_id,)

    def truncate(self, generated: int) -> None:
        """See :meth:`ForwardEngine.truncate`.

        Safe after a forward pass that failed halfway, whose layers may hold different lengths:
        each layer is cropped to the same absolute length, or the cache is rebuilt.
        """
        del self._generated[generated:]
        self._expected.clear()
        self._ahead.clear()
        if not self._generated:
            self._cache, self._pending = self._new_cache(), self._prompt
            return
        keep = len(self._prompt) + len(self._generated) - 1
        if self._crop(keep):
            self._pending = (self._generated[-1],)
        else:
            # Caches that cannot crop (sliding windows past their size): rebuild from scratch.
            self._cache = self._new_cache()
            self._pending = self._prompt + tuple(self._generated)

    def _crop(self, length: int) -> bool:
        try:
            for layer in self._cache.layers:
                held = layer.get_seq_length()
                if held < length:
                    return False
                layer.crop(length - held)
        except (AttributeError, RuntimeError, ValueError):
            return False
        return bool(self._cache.get_seq_length() == length)

    @property
    def memory_bytes(self) -> int:
        """See :meth:`ForwardEngine.memory_bytes`: the keys and values of every layer (a growing
        layer's buffers, room to spare included)."""
        total = 0
        for layer in getattr(self._cache, "layers", []):
            if isinstance(layer, GrowingLayer):
                total += layer.held_bytes
                continue
            for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(tensor, torch.Tensor):
                    total += tensor.numel() * tensor.element_size()
        return total
