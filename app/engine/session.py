"""The stepper: forward -> fill mask -> sample -> accept, one token at a time, all recorded."""

from __future__ import annotations

import threading
import time
from enum import StrEnum
from typing import Any

import torch
import xgrammar as xgr
from transformers import DynamicCache

from app.engine.grammar import CompileResult
from app.engine.jsonpath import JsonPosition, advance
from app.engine.mask import allowed_vector, bitmask_bytes, is_allowed, words_from_bytes
from app.engine.model import LoadedModel
from app.engine.parser_state import active_rules
from app.engine.prompt import Prompt
from app.engine.records import StepRecord, TopToken, Validation
from app.engine.sampling import SamplingParams, choose_token
from app.engine.validation import validate_output
from app.exceptions import InvalidInput, SessionFinished, TokenRefused

__all__ = ["Session", "StopReason"]


class StopReason(StrEnum):
    """Why a session stopped."""

    #: the grammar was complete and the matcher accepted a stop token
    TERMINATED = "terminated"
    #: the model's end-of-sequence token was accepted without the matcher terminating
    EOS = "eos"
    #: ``max_tokens`` steps were taken
    MAX_TOKENS = "max_tokens"
    #: the matcher refused a token its own mask allowed (an xgrammar bug, shown, not hidden)
    REJECTED = "rejected"


class Session:
    """One generation under one grammar, stepped by the caller.

    The KV cache holds every token but the last chosen one, which the next step's forward pass
    consumes (the prompt, for the first step). Going back therefore crops the cache and re-runs
    the very forward pass that produced the step, so the records repeat exactly (timings aside).

    Args:
        model: the loaded model (shared; forward passes are serialised by its lock).
        grammar: the compiled grammar that masks every step.
        prompt: the rendered prompt.
        sampling: greedy by default; the draw of step i depends only on (seed, i).
        max_tokens: steps after which the session stops.
        top_k: candidates of the raw distribution recorded per step.
    """

    def __init__(
        self,
        model: LoadedModel,
        grammar: CompileResult,
        prompt: Prompt,
        *,
        sampling: SamplingParams | None = None,
        max_tokens: int = 256,
        top_k: int = 10,
    ) -> None:
        if max_tokens < 1:
            raise InvalidInput(f"max_tokens must be at least 1, got {max_tokens}")
        if not 1 <= top_k <= model.tokens.vocab_size:
            raise InvalidInput(f"top_k must be between 1 and the vocabulary size, got {top_k}")
        self.model = model
        self.grammar = grammar
        self.prompt = prompt
        self.sampling = sampling or SamplingParams()
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.steps: list[StepRecord] = []
        self.stop_reason: StopReason | None = None
        self._tokens = model.tokens
        self._matcher = xgr.GrammarMatcher(grammar.compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, self._tokens.vocab_size)
        self._cache = DynamicCache(config=model.model.config)
        self._pending: tuple[int, ...] = prompt.token_ids
        self._positions = [JsonPosition()]
        self._accepted: list[bool] = []
        self._records_bytes = 0
        # Callers may step from several threads (a web request, a stream); actions serialise.
        self._lock = threading.RLock()

    @property
    def done(self) -> bool:
        """Whether the session has stopped; ``back`` reopens it."""
        return self.stop_reason is not None

    @property
    def text(self) -> str:
        """The output so far (special tokens such as EOS are not part of it)."""
        data = b"".join(self._tokens.output_bytes(s.token_id) for s in self.steps)
        return data.decode("utf-8", errors="replace")

    @property
    def kv_bytes(self) -> int:
        """Memory held by this session's KV cache."""
        total = 0
        for layer in getattr(self._cache, "layers", []):
            for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(tensor, torch.Tensor):
                    total += tensor.numel() * tensor.element_size()
        return total

    @property
    def records_bytes(self) -> int:
        """Memory held by this session's step records (their bitmasks, mostly)."""
        return self._records_bytes

    @property
    def complete(self) -> bool:
        """Whether the output so far is a complete sentence of the grammar."""
        with self._lock:  # a step or a rollback may be moving the matcher
            return bool(self._matcher.is_terminated() or self._matcher.is_completed())

    def validation(self) -> Validation | None:
        """The verdict on the output against the source, once the session has stopped."""
        with self._lock:
            if not self.done:
                return None
            return validate_output(self.grammar.spec, self.text, complete=self.complete)

    def step(self) -> StepRecord:
        """Generate one token under the mask.

        Raises:
            SessionFinished: the session has already stopped.
        """
        with self._lock:
            return self._step(None)

    def force(self, token_id: int) -> StepRecord:
        """Take ``token_id`` as the next token, if the grammar allows it; the record is marked.

        Raises:
            InvalidInput: the id is outside the vocabulary.
            TokenRefused: the mask blocks the token here; nothing changed.
            SessionFinished: the session has already stopped.
        """
        self._check_token_id(token_id)
        with self._lock:
            return self._step(token_id)

    def force_at(self, index: int, token_id: int) -> StepRecord:
        """Go back to step ``index`` and force ``token_id`` there: "what if it had said X?".

        The token is checked against the mask recorded for that step first; when it is blocked,
        nothing changes.

        Raises:
            InvalidInput: the index is past the next step, or the id is outside the vocabulary.
            TokenRefused: the mask of step ``index`` blocks the token.
        """
        with self._lock:
            if not 0 <= index <= len(self.steps):
                raise InvalidInput(f"at must be between 0 and {len(self.steps)}, got {index}")
            if index < len(self.steps):
                self._check_token_id(token_id)
                words = torch.from_numpy(words_from_bytes(self.steps[index].bitmask).copy())
                if not is_allowed(words, token_id):
                    raise self._refusal(token_id, words, index)
                self.back(len(self.steps) - index)
            return self.force(token_id)

    def run(self, n: int) -> list[StepRecord]:
        """Take up to ``n`` steps, fewer when the session stops first."""
        records: list[StepRecord] = []
        while len(records) < n and not self.done:
            records.append(self.step())
        return records

    def back(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (all of them if fewer): matcher rollback, KV-cache crop."""
        if n < 1:
            raise InvalidInput(f"n must be at least 1, got {n}")
        with self._lock:
            self._back(n)

    def _check_token_id(self, token_id: int) -> None:
        if not 0 <= token_id < self._tokens.vocab_size:
            raise InvalidInput(
                f"token_id must be between 0 and {self._tokens.vocab_size - 1}, got {token_id}"
            )

    def _back(self, n: int) -> None:
        n = min(n, len(self.steps))
        if n == 0:
            return
        self._matcher.rollback(sum(self._accepted[-n:]))
        self._records_bytes -= sum(s.nbytes() for s in self.steps[-n:])
        del self.steps[-n:], self._accepted[-n:], self._positions[-n:]
        self.stop_reason = None
        kept = tuple(s.token_id for s in self.steps)
        cached = len(self.prompt.token_ids) + len(kept) - 1 if kept else 0
        pending = kept[-1:] if kept else self.prompt.token_ids
        try:
            self._cache.crop(cached - self._cache.get_seq_length())
        except (RuntimeError, ValueError):
            # Caches that cannot crop (sliding windows past their size): rebuild from scratch.
            self._cache = DynamicCache(config=self.model.model.config)
            pending = self.prompt.token_ids + kept
        self._pending = pending

    def _forward(self) -> torch.Tensor:
        ids = torch.tensor([self._pending], device=self.model.device)
        with self.model.lock, torch.inference_mode():
            out = self.model.model(
                input_ids=ids, cache=self._cache, use_cache=True, logits_to_keep=1
            )
        self._pending = ()
        logits: torch.Tensor = out.logits[0, -1].float()
        return logits

    def _refusal(self, token_id: int, words: torch.Tensor, index: int) -> TokenRefused:
        allowed = allowed_vector(words, self._tokens.vocab_size).nonzero().flatten().tolist()
        examples = ", ".join(repr(t) for t in self._tokens.shortest_texts(allowed, 8))
        return TokenRefused(
            f"the grammar blocks token {token_id} ({self._tokens.text(token_id)!r}) at step "
            f"{index}: {len(allowed)} of {self._tokens.vocab_size} tokens are allowed "
            f"here, e.g. {examples}"
        )

    def _step(self, forced: int | None) -> StepRecord:
        if self.stop_reason is not None:
            raise SessionFinished(
                f"the session has stopped ({self.stop_reason.value}); go back to continue"
            )
        start = time.perf_counter()
        index = len(self.steps)
        jump_forward = self._matcher.find_jump_forward_string()
        mask_start = time.perf_counter()
        self._matcher.fill_next_token_bitmask(self._bitmask)
        mask_us = (time.perf_counter() - mask_start) * 1e6
        words = self._bitmask[0]
        if forced is not None and not is_allowed(words, forced):
            raise self._refusal(forced, words, index)
        forward_start = time.perf_counter()
        logits = self._forward()
        forward_ms = (time.perf_counter() - forward_start) * 1000
        view = self._distribution(logits)
        token = forced if forced is not None else choose_token(view["masked"], self.sampling, index)
        allowed_bit = is_allowed(words, token)
        accepted = bool(self._matcher.accept_token(token))
        position = self._positions[-1]
        if self.grammar.spec.is_json and accepted:
            position = advance(position, self._tokens.output_bytes(token))
        probs = view["probs"]
        record = StepRecord(
            index=index,
            token_id=token,
            token_text=self._tokens.text(token),
            token_bytes=self._tokens.token_bytes[token],
            forced=forced is not None,
            prob=float(probs[token]),
            rank=int((probs > probs[token]).sum()),
            top=view["top"],
            blocked_mass=view["blocked_mass"],
            allowed_count=view["allowed_count"],
            vocab_size=self._tokens.vocab_size,
            bitmask=bitmask_bytes(words),
            depth=position.depth,
            path=position.path if self.grammar.spec.is_json else "",
            rules=tuple(active_rules(self._matcher, self.grammar.rule_names)),
            jump_forward=jump_forward,
            mask_accept_agree=allowed_bit == accepted,
            forward_ms=forward_ms,
            mask_us=mask_us,
            total_ms=(time.perf_counter() - start) * 1000,
            terminated=bool(self._matcher.is_terminated()),
        )
        self.steps.append(record)
        self._records_bytes += record.nbytes()
        self._accepted.append(accepted)
        self._positions.append(position)
        self._pending = (token,)
        self.stop_reason = self._stop_reason(record, accepted)
        return record

    def _distribution(self, logits: torch.Tensor) -> dict[str, Any]:
        """The raw distribution's figures and the logits masked by xgrammar's own kernel."""
        words = self._bitmask.to(logits.device, non_blocking=True)
        masked = logits.unsqueeze(0).clone()
        xgr.apply_token_bitmask_inplace(masked, words)
        allowed = allowed_vector(words[0], self._tokens.vocab_size)
        probs = torch.softmax(logits, dim=-1)
        top_probs, top_ids = torch.topk(probs, self.top_k)
        top = tuple(
            TopToken(token_id=i, text=self._tokens.text(i), prob=p, logit=logit, allowed=ok)
            for p, i, logit, ok in zip(
                top_probs.tolist(),
                top_ids.tolist(),
                logits[top_ids].tolist(),
                allowed[top_ids].tolist(),
                strict=True,
            )
        )
        return {
            "masked": masked[0],
            "probs": probs.cpu(),
            "top": top,
            "allowed_count": int(allowed.sum()),
            "blocked_mass": float(probs.masked_fill(allowed, 0.0).sum()),
        }

    def _stop_reason(self, record: StepRecord, accepted: bool) -> StopReason | None:
        if not accepted:
            return StopReason.REJECTED
        if record.terminated:
            return StopReason.TERMINATED
        if record.token_id in self._tokens.stop_ids:
            return StopReason.EOS
        if len(self.steps) >= self.max_tokens:
            return StopReason.MAX_TOKENS
        return None
