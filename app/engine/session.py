"""The stepper: forward -> fill mask -> sample -> probe -> accept, one token at a time, recorded.

A step is a transaction over the two engines it drives (the masking engine and the forward
engine): it either completes and is recorded, or fails and leaves the session as it was.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from enum import StrEnum

import torch

from app.engine.compare import Follower
from app.engine.distribution import MaskedDistribution, mask_distribution
from app.engine.forward.base import ForwardEngine, RawDistribution, ServingModel
from app.engine.grammar import CompileResult
from app.engine.jsonpath import JsonPosition, advance
from app.engine.mask import (
    allowed_array,
    allowed_vector,
    bitmask_bytes,
    is_allowed,
    new_bitmask,
    words_from_bytes,
)
from app.engine.masking.base import MaskingEngine
from app.engine.probe import probe_mask
from app.engine.prompt import Prompt
from app.engine.reasoning import ReasoningGate, ReasoningMode
from app.engine.records import GrammarState, Probe, StepRecord, Validation
from app.engine.sampling import SamplingParams
from app.engine.segments import SegmentTracker
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
    #: the matcher refused a token its own mask allowed (an engine bug, either library's: shown)
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class _Mask:
    """What a step knows before its forward pass: the state its mask was computed in."""

    before: GrammarState
    jump_forward: str
    mask_us: float
    #: False while the reasoning is open (``mask_after_end``): the bitmask allows everything
    masked: bool = True


class Session:
    """One generation under one grammar, stepped by the caller.

    Going back rolls the masking engine back and truncates the forward engine's prefix, which
    then re-runs the very forward pass that produced the step, so the records repeat exactly
    (timings aside). A step that fails anywhere leaves the session exactly as it was before it.

    Args:
        model: the model (its tokens and identity), local or remote.
        grammar: the compiled grammar that masks every step.
        prompt: the rendered prompt.
        masking: the grammar's matcher, in its start state.
        forward: the prompt's forward engine, with nothing generated yet.
        sampling: greedy by default; the draw of step i depends only on (seed, i).
        max_tokens: steps after which the session stops.
        top_k: candidates of the raw distribution recorded per step.
        follower: compare mode: a second masking engine that follows the same tokens, its
            differences recorded in each step's ``follower``.
        reasoning: what the stack does while the model reasons (see :mod:`app.engine.reasoning`),
            or the gate itself (a builder's end markers).
    """

    def __init__(
        self,
        model: ServingModel,
        grammar: CompileResult,
        prompt: Prompt,
        *,
        masking: MaskingEngine,
        forward: ForwardEngine,
        sampling: SamplingParams | None = None,
        max_tokens: int = 256,
        top_k: int = 10,
        follower: Follower | None = None,
        reasoning: ReasoningMode | ReasoningGate = ReasoningMode.NONE,
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
        self._masking = masking
        self._forward = forward
        self.follower = follower
        self._bitmask = new_bitmask(self._tokens.vocab_size)
        self._positions = [JsonPosition()]
        # Matcher steps taken per step (what back() rolls back): 0 or 1, more at a boundary.
        self._accepted: list[int] = []
        self._records_bytes = 0
        self._state: GrammarState | None = None
        self.reasoning = (
            reasoning
            if isinstance(reasoning, ReasoningGate)
            else ReasoningGate.for_grammar(reasoning, grammar, prompt.text)
        )
        if self.reasoning.gates and follower is not None:
            raise InvalidInput(
                "compare mode does not follow a reasoning boundary yet: "
                "use reasoning none or mask_everywhere with compare"
            )
        self._segments = SegmentTracker.for_grammar(grammar)
        if self.reasoning.closed_in_prompt and self.reasoning.skeleton:
            # The template closed the reasoning: the tag's own block is passed, empty, once.
            masking.accept_bytes(self.reasoning.skeleton)
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
    def first_divergence(self) -> int | None:
        """Compare mode: the first step at which the follower's view differed, or None."""
        return next((s.index for s in self.steps if s.follower and s.follower.diverged), None)

    @property
    def kv_bytes(self) -> int:
        """Memory held by this session's forward engine (its KV cache)."""
        return self._forward.memory_bytes

    @property
    def records_bytes(self) -> int:
        """Memory held by this session's step records (their bitmasks, mostly)."""
        return self._records_bytes

    @property
    def complete(self) -> bool:
        """Whether the output so far is a complete sentence of the grammar."""
        with self._lock:  # a step or a rollback may be moving the matcher
            return self._masking.is_terminated() or self._masking.is_completed()

    @property
    def state(self) -> GrammarState:
        """The parser state after the last token: the state the next mask is computed in."""
        with self._lock:
            if self._state is None:
                position = self._positions[-1]
                is_json = self.grammar.spec.is_json
                self._state = GrammarState(
                    depth=position.depth,
                    path=position.path if is_json else "",
                    rules=tuple(self._masking.active_rules()),
                )
            return self._state

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
        """Take up to ``n`` steps, fewer when the session stops first.

        A failing step raises; the steps before it are kept, and it leaves no trace.
        """
        records: list[StepRecord] = []
        while len(records) < n and not self.done:
            records.append(self.step())
        return records

    def back(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (all of them if fewer): matcher rollback, prefix truncation."""
        if n < 1:
            raise InvalidInput(f"n must be at least 1, got {n}")
        with self._lock:
            n = min(n, len(self.steps))
            if n == 0:
                return
            self._masking.rollback(sum(self._accepted[-n:]))
            self._records_bytes -= sum(s.nbytes() for s in self.steps[-n:])
            del self.steps[-n:], self._accepted[-n:], self._positions[-n:]
            self._forward.truncate(len(self.steps))
            if self.follower is not None:
                self.follower.truncate(len(self.steps))
            self.stop_reason = None
            self._state = None

    def _check_token_id(self, token_id: int) -> None:
        if not 0 <= token_id < self._tokens.vocab_size:
            raise InvalidInput(
                f"token_id must be between 0 and {self._tokens.vocab_size - 1}, got {token_id}"
            )

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
        output = self._output_bytes()
        mask = self._fill_mask(self.reasoning.open_before(output))
        words = self._bitmask[0]
        if forced is not None and not is_allowed(words, forced):
            raise self._refusal(forced, words, index)
        accepted = followed = False
        steps = 0
        try:
            raw = self._forward.distribution()
            token = forced
            if token is None:
                token = self._forward.choose(raw, self._bitmask, self.sampling, index=index)
            raw = self._forward.with_token(raw, token)
            view = mask_distribution(raw, self._bitmask, tokens=self._tokens, top_k=self.top_k)
            allowed = allowed_array(words, self._tokens.vocab_size)
            top = [t.token_id for t in view.top]
            probe = Probe(0)  # no mask applied: nothing to cross-check
            if mask.masked:
                probe = probe_mask(self._masking, allowed, chosen=token, top=top, index=index)
            comparison = None
            if self.follower is not None:  # in the state this step's mask was computed in
                probs = view.probs if view.probs is not None else view.known
                comparison = self.follower.compare(words, probs, self._masking.probe_token)
            steps = self._accept(token, output, mask.masked)
            accepted = steps >= 0
            position = self._positions[-1]
            if mask.masked and accepted and self.grammar.spec.is_json:
                position = advance(position, self._tokens.output_bytes(token))
            record = self._record(index, token, forced is not None, mask, raw, view, probe, start)
            if self._segments is not None:  # a tag: where in it, read from the text so far
                where = self._segments.at(output, self.reasoning)
                record = dataclasses.replace(
                    record, segment=where.segment, depth=where.depth, path=where.path
                )
            if self.follower is not None:
                compared = self.follower.follow(record, comparison)
                followed = True
                record = dataclasses.replace(record, follower=compared)
            stop_reason = self._stop_reason(record, accepted)
            self._forward.extend(token)
        except BaseException:
            # A step is a transaction: undo what the engines did, whatever failed.
            if steps > 0:
                self._masking.rollback(steps)
            if followed and self.follower is not None:
                self.follower.undo()
            self._forward.truncate(index)
            raise
        self.steps.append(record)
        self._records_bytes += record.nbytes()
        self._accepted.append(max(steps, 0))
        self._positions.append(position)
        self.stop_reason = stop_reason
        self._state = None
        return record

    def _fill_mask(self, reasoning: bool = False) -> _Mask:
        """Fill the bitmask for the current state; nothing changes. While the reasoning is open
        (``mask_after_end``) no mask applies: every bit is set and no state is claimed."""
        if reasoning:
            self._bitmask.fill_(-1)
            return _Mask(GrammarState(0, "", ()), "", 0.0, masked=False)
        before = self.state
        jump_forward = self._masking.find_jump_forward_string()
        mask_start = time.perf_counter()
        self._masking.fill_next_token_bitmask(self._bitmask)
        return _Mask(before, jump_forward, (time.perf_counter() - mask_start) * 1e6)

    def _output_bytes(self) -> bytes:
        """The generated bytes as the reasoning boundary reads them (markers may be special
        tokens: their bytes count; a stop token's do not)."""
        if not self.reasoning.gates and self._segments is None:
            return b""
        stops = self._tokens.stop_ids
        return b"".join(
            self._tokens.token_bytes[s.token_id] for s in self.steps if s.token_id not in stops
        )

    def _accept(self, token: int, output: bytes, masked: bool) -> int:
        """Feed the step's token to the matcher: the matcher steps taken, -1 when refused.

        An unmasked step feeds nothing, unless its token ends the reasoning: then the content
        after the boundary (see :mod:`app.engine.reasoning`), refused like any token.
        """
        if masked:
            return 1 if self._masking.accept_token(token) else -1
        data = b"" if token in self._tokens.stop_ids else self._tokens.token_bytes[token]
        fed = self.reasoning.fed_after(output, data)
        if not fed:
            return 0
        return self._masking.accept_bytes(fed) or -1

    def _record(
        self,
        index: int,
        token: int,
        forced: bool,
        mask: _Mask,
        raw: RawDistribution,
        view: MaskedDistribution,
        probe: Probe,
        start: float,
    ) -> StepRecord:
        return StepRecord(
            index=index,
            token_id=token,
            token_text=self._tokens.text(token),
            token_bytes=self._tokens.token_bytes[token],
            forced=forced,
            prob=view.prob(token),
            rank=view.rank(token),
            top=view.top,
            blocked_mass=view.blocked_mass,
            allowed_count=view.allowed_count,
            vocab_size=self._tokens.vocab_size,
            bitmask=bitmask_bytes(self._bitmask[0]),
            depth=mask.before.depth,
            path=mask.before.path,
            rules=mask.before.rules,
            jump_forward=mask.jump_forward,
            probe=probe,
            mask_accept_agree=not probe.disagree,
            engine=self._masking.name,
            forward_ms=raw.forward_ms,
            mask_us=mask.mask_us,
            total_ms=(time.perf_counter() - start) * 1000,
            terminated=self._masking.is_terminated(),
            masked=mask.masked,
            # A remote engine's record states which figures are bounds; a local one's are exact.
            inexact=_inexact(token, view) if view.reports_bounds else None,
            blocked_mass_max=view.blocked_mass_max if view.reports_bounds else None,
            allowed_tokens=view.allowed_tokens,
        )

    def _stop_reason(self, record: StepRecord, accepted: bool) -> StopReason | None:
        if not accepted:
            return StopReason.REJECTED
        if record.terminated:
            return StopReason.TERMINATED
        if record.token_id in self._tokens.stop_ids:
            return StopReason.EOS
        if record.index + 1 >= self.max_tokens:
            return StopReason.MAX_TOKENS
        return None


def _inexact(token: int, view: MaskedDistribution) -> tuple[str, ...]:
    return view.inexact if view.rank_exact(token) else (*view.inexact, "rank")
