"""The stepper: forward -> fill mask -> sample -> accept -> checks, one token at a time, recorded.

A step is a transaction over the two engines it drives (the masking engine and the forward
engine): it either completes and is recorded, or fails and leaves the session as it was.

Between two forward passes only the token's choice and acceptance run (and the mask); the
checks of step k (the probe, the follower's comparison, the distribution's view) run on copies
of the matcher while the forward pass of step k+1 does, and step k's record is returned, complete,
when both have ended (:mod:`app.engine.stepper.step_pipeline`). The next step then starts with its
forward pass done.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum

import torch

from app.engine.budget import checkpoint, unbudgeted
from app.engine.grammars.reasoning import ReasoningGate, ReasoningMode
from app.engine.grammars.spec import CompileResult
from app.engine.grammars.validation import validate_output
from app.engine.jsonpath import JsonPosition, advance
from app.engine.mask import (
    allowed_array,
    allowed_vector,
    bitmask_bytes,
    is_allowed,
    new_bitmask,
    words_from_bytes,
)
from app.engine.mask_summary import class_counts
from app.engine.masking.base import MaskingEngine
from app.engine.masking.compare import Follower
from app.engine.masking.drafts import propose_drafts, validate_drafts
from app.engine.masking.probe import probe_mask
from app.engine.masking.rollback_check import (
    CHECKPOINTS,
    Reference,
    check_rollback,
    merge,
    reference_of_fork,
    reference_of_record,
)
from app.engine.model.forward.base import (
    ExpectingForward,
    ForwardEngine,
    RawDistribution,
    ServingModel,
)
from app.engine.model.prompt import Prompt
from app.engine.model.sampling import SamplingParams
from app.engine.records import (
    DraftsRecord,
    FollowerRecord,
    GrammarState,
    Probe,
    StepRecord,
    Straddle,
    Validation,
)
from app.engine.stepper.breakpoints import DEFAULT_ALARMS, Breakpoint, Watch, records_with
from app.engine.stepper.distribution import MaskedDistribution, mask_distribution
from app.engine.stepper.segments import SegmentTracker
from app.engine.stepper.step_pipeline import (
    ForwardOutcome,
    Prepared,
    run_beside,
    run_forward,
    wait_quietly,
)
from app.engine.stepper.stops import (
    EndReport,
    EndRules,
    EndWalk,
    end_walk,
    first_stop_string,
    without_stops,
)
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
    #: a request ``stop_token_ids`` id or a ``stop`` string ended it (vLLM's stop checker)
    STOP = "stop"


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
        draft_tokens: speculative drafts validated before each step (see
            :mod:`app.engine.masking.drafts`), recorded in its ``drafts``.
        overlap: run each step's checks during the next step's forward pass (on a worker
            thread); False runs everything on the caller's thread, one after the other.
        reasoning: what the stack does while the model reasons (see
        :mod:`app.engine.grammars.reasoning`),
            or the gate itself (a builder's end markers).
        breakpoints: where a run stops, or (``alarm_only``) which steps it marks; the default
            alarms are watched besides (see :mod:`app.engine.stepper.breakpoints`).
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
        draft_tokens: int = 0,
        overlap: bool = True,
        reasoning: ReasoningMode | ReasoningGate = ReasoningMode.NONE,
        breakpoints: Sequence[Breakpoint] = (),
        end_rules: EndRules | None = None,
    ) -> None:
        if max_tokens < 1:
            raise InvalidInput(f"max_tokens must be at least 1, got {max_tokens}")
        if draft_tokens < 0:
            raise InvalidInput(f"draft_tokens must be at least 0, got {draft_tokens}")
        if not 1 <= top_k <= model.tokens.vocab_size:
            raise InvalidInput(f"top_k must be between 1 and the vocabulary size, got {top_k}")
        self.model = model
        self.grammar = grammar
        self.prompt = prompt
        self.sampling = sampling or SamplingParams()
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.draft_tokens = draft_tokens
        self.overlap = overlap
        self.steps: list[StepRecord] = []
        self.stop_reason: StopReason | None = None
        self._tokens = model.tokens
        self._masking = masking
        self._forward = forward
        self.follower = follower
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
        self._end = (
            None if end_rules is None else end_walk(grammar, model.tokens, end_rules, model=model)
        )
        if self.reasoning.closed_in_prompt and self.reasoning.skeleton:
            # The template closed the reasoning: the tag's own block is passed, empty, once.
            masking.accept_bytes(self.reasoning.skeleton)
        # The next step, prepared during the last one (its mask, and its forward pass run).
        self._ahead: Prepared | None = None
        # Copies of the matcher in the states of the last CHECKPOINTS steps, by step index.
        self._checkpoints: dict[int, MaskingEngine] = {}
        # After a back: the step whose state the rollback must restore, and what that state
        # answered before (None: ask its checkpoint).
        self._rolled_back_to: int | None = None
        self._rollback_reference: Reference | None = None
        # Callers may step from several threads (a web request, a stream); actions serialise.
        self._lock = threading.RLock()
        #: the breakpoints and alarms, evaluated on each step's record
        self.watch = Watch(breakpoints, defaults=DEFAULT_ALARMS)

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
                self._state = self._state_at(self._positions[-1])
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

    def expect(self, token_ids: Sequence[int]) -> bool:
        """Tell the forward engine the tokens the next steps will take (a recorded trace
        replayed), so that their forward passes run now, in one pass, when it can.

        The steps are taken and recorded as ever, each choosing its token from its own
        distribution under its own mask; only where the logits come from changes (one pass's
        rows, within float error of one pass a step). A step that chooses or is forced another
        token drops the rest, and the steps after it run their passes one by one.

        Returns:
            Whether the engine runs them ahead (a remote engine does not).

        Raises:
            InvalidInput: a token id outside the vocabulary.
        """
        for token_id in token_ids:
            self._check_token_id(token_id)
        with self._lock:
            if self.done or not isinstance(self._forward, ExpectingForward):
                return False
            self._forward.expect(token_ids)
            return True

    def back(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (all of them if fewer): matcher rollback, prefix truncation."""
        if n < 1:
            raise InvalidInput(f"n must be at least 1, got {n}")
        with self._lock:
            n = min(n, len(self.steps))
            if n == 0:
                return
            index = len(self.steps) - n
            if index not in self._checkpoints:
                # No copy kept of that state any more: its record says what the matcher answered
                # there before it advanced (see app.engine.masking.rollback_check).
                previous = self.steps[index - 1] if index else None
                self._rollback_reference = reference_of_record(self.steps[index], previous)
            else:
                self._rollback_reference = None
            self._rolled_back_to = index
            self._masking.rollback(sum(self._accepted[-n:]))
            self._records_bytes -= sum(s.nbytes() for s in self.steps[-n:])
            del self.steps[-n:], self._accepted[-n:], self._positions[-n:]
            self.watch.truncate(len(self.steps))
            self._drop_checkpoints(after=index)
            self._ahead = None  # its forward pass and mask were for the longer prefix
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
        checkpoint(index, unit="tokens of output")  # how far, should the step's budget run out
        ahead, self._ahead = self._ahead, None
        ran: list[ForwardOutcome] = []  # the forward passes this call ran (its idle time)
        if ahead is None or ahead.outcome is None:
            ahead = self._forward_and_prepare(index, ahead, ran)
        words = ahead.bitmask[0]
        if forced is not None and not is_allowed(words, forced):
            self._ahead = ahead
            raise self._refusal(forced, words, index)
        steps = 0
        work = _Beside()
        job: Future[None] | None = None
        try:
            assert ahead.outcome is not None
            raw = ahead.outcome.result()
            token = forced
            if token is None:
                mask = self._after_processors(ahead.bitmask, index)
                token = self._forward.choose(raw, mask, self.sampling, index=index)
            raw = self._forward.with_token(raw, token)
            steps = self._accept(token, ahead)
            accepted = steps >= 0
            terminated = self._masking.is_terminated()
            stop_reason = self._stop_reason(index, token, accepted, terminated)
            self._forward.extend(token)
            finish = functools.partial(
                self._finish, work, ahead, token, forced is not None, raw, accepted, terminated
            )
            if stop_reason is None and self.overlap:
                # The next forward pass runs on this thread while the worker prepares the next
                # mask and checks this step: nothing else stands between the two passes.
                job = run_beside(functools.partial(finish, prepare_next=True))
                ran.append(run_forward(self._forward))
                job.result()
                job = None
                assert work.next is not None
                work.next.outcome = ran[-1]
            else:
                finish(prepare_next=False)
        except BaseException:
            # A step is a transaction: undo what the engines did, whatever failed (its walk
            # budget spent too: the undoing is never cut short).
            with unbudgeted():
                self._undo_step(index, steps, job, work, ahead)
            raise
        assert work.record is not None
        alarms = self.watch.evaluate(records_with(self.steps, work.record))
        idle = time.perf_counter() - start - sum(r.end - r.start for r in ran)
        record = dataclasses.replace(
            work.record, total_ms=raw.forward_ms + max(idle, 0.0) * 1000, alarms=alarms
        )
        self.steps.append(record)
        self._records_bytes += work.nbytes
        self._accepted.append(max(steps, 0))
        self._positions.append(work.position)
        self.stop_reason = stop_reason
        self._state = None
        self._ahead = work.next
        return record

    def _undo_step(
        self, index: int, steps: int, job: Future[None] | None, work: _Beside, ahead: Prepared
    ) -> None:
        """Undo step ``index``, which failed: its matcher steps, the follower's, its prefix."""
        wait_quietly(job)
        if steps > 0:
            self._masking.rollback(steps)
        if work.followed and self.follower is not None:
            self.follower.undo()
        self._forward.truncate(index)
        self._drop_checkpoints(after=index)
        ahead.outcome = None  # the truncated prefix runs its forward pass again
        self._ahead = ahead

    def _forward_and_prepare(
        self, index: int, ahead: Prepared | None, ran: list[ForwardOutcome]
    ) -> Prepared:
        """Step ``index``'s forward pass (its prefix changed, or it is the first) and, unless
        ``ahead`` holds it already, its mask, prepared beside the pass when overlapping."""
        job: Future[Prepared] | None = None
        try:
            if ahead is None and self.overlap:
                job = run_beside(functools.partial(self._prepare, index))
            outcome = run_forward(self._forward)
            ran.append(outcome)
            prepared = ahead or (job.result() if job is not None else self._prepare(index))
        except BaseException:
            wait_quietly(job)
            self._forward.truncate(index)
            self._ahead = ahead
            raise
        prepared.outcome = outcome
        return prepared

    def _finish(
        self,
        work: _Beside,
        ahead: Prepared,
        token: int,
        forced: bool,
        raw: RawDistribution,
        accepted: bool,
        terminated: bool,
        *,
        prepare_next: bool,
    ) -> None:
        """What step ``ahead.index`` still needs once its token is taken, into ``work``: the
        position after it, the next step's mask (``prepare_next``), the record, its checks.

        Runs beside the next forward pass when overlapping: it touches the matcher, the
        follower and the checkpoints, never the forward engine.
        """
        position = self._positions[-1]
        if ahead.masked and accepted and self.grammar.spec.is_json:
            position = advance(position, self._tokens.output_bytes(token))
        work.position = position
        if prepare_next:
            output = ahead.output + self._reasoning_bytes(token)
            work.next = self._prepare(ahead.index + 1, position=position, output=output)
        record = self._checked(ahead, token, forced, raw, terminated)
        if self.follower is not None:
            compared = self.follower.follow(record, record.follower)
            work.followed = True
            record = dataclasses.replace(record, follower=compared)
        work.nbytes = record.nbytes()
        work.record = record

    def _prepare(
        self, index: int, *, position: JsonPosition | None = None, output: bytes | None = None
    ) -> Prepared:
        """Step ``index``'s mask, state and drafts, and the check of a rollback before it.

        The matcher is in the step's state (it has taken the previous token); ``position`` and
        ``output`` (the generated bytes) are those there when the previous step is not recorded
        yet. While the reasoning is open (``mask_after_end``) no mask applies: every bit is set,
        no state is claimed, and neither drafts nor a rollback are checked.
        """
        if output is None:
            output = self._output_bytes()
        if self.reasoning.open_before(output):
            if self._rolled_back_to == index:
                self._rolled_back_to, self._rollback_reference = None, None
            bitmask = new_bitmask(self._tokens.vocab_size)
            bitmask.fill_(-1)
            return Prepared(
                index=index,
                bitmask=bitmask,
                before=GrammarState(0, "", ()),
                jump_forward="",
                mask_us=0.0,
                checkpoint=self._checkpoints.get(index) or self._masking.fork(),
                drafts=None,
                rollback=None,
                masked=False,
                output=output,
            )
        checkpoint = self._checkpoints.get(index)
        reference = None
        if self._rolled_back_to == index:  # the first step after a back: check the rollback
            reference = self._rollback_reference
            if reference is None and checkpoint is not None:
                reference = reference_of_fork(checkpoint, self._tokens.vocab_size)
        if checkpoint is None:
            checkpoint = self._masking.fork()
        drafts = validation = None
        if self.draft_tokens:
            proposed = propose_drafts(self._context(), self.draft_tokens)
            validation = validate_drafts(self._masking, proposed, self._tokens.vocab_size)
            drafts = DraftsRecord(proposed=validation.proposed, accepted=validation.accepted)
        bitmask = new_bitmask(self._tokens.vocab_size)
        mask_start = time.perf_counter()
        self._masking.fill_next_token_bitmask(bitmask)
        mask_us = (time.perf_counter() - mask_start) * 1e6
        jump_forward = self._masking.find_jump_forward_string()
        rollback = None
        if reference is not None or (validation is not None and validation.accepted):
            allowed = allowed_array(bitmask[0], self._tokens.vocab_size)
            terminated = self._masking.is_terminated()
            if reference is not None:
                rollback = check_rollback(allowed, jump_forward, terminated, reference)
            if validation is not None and validation.accepted:
                before_drafts = Reference(
                    allowed=allowed_array(validation.first_mask[0], self._tokens.vocab_size),
                    jump_forward=checkpoint.find_jump_forward_string(),
                    terminated=checkpoint.is_terminated(),
                )
                drafted = check_rollback(allowed, jump_forward, terminated, before_drafts)
                rollback = merge(rollback, drafted)
        self._checkpoints[index] = checkpoint
        self._drop_checkpoints(before=index - CHECKPOINTS + 1)
        if self._rolled_back_to == index:
            self._rolled_back_to, self._rollback_reference = None, None
        return Prepared(
            index=index,
            bitmask=bitmask,
            before=self._state_at(position or self._positions[-1]),
            jump_forward=jump_forward,
            mask_us=mask_us,
            checkpoint=checkpoint,
            drafts=drafts,
            rollback=rollback,
            output=output,
        )

    def _checked(
        self, ahead: Prepared, token: int, forced: bool, raw: RawDistribution, terminated: bool
    ) -> StepRecord:
        """Step ``ahead.index``'s record, its checks done: the distribution's view, the probe
        and the follower's comparison, on copies of the matcher in the step's state."""
        words = ahead.bitmask[0]
        allowed = allowed_array(words, self._tokens.vocab_size)
        view = mask_distribution(raw, allowed, tokens=self._tokens, top_k=self.top_k)
        top = [t.token_id for t in view.top]
        probe, comparison = Probe(0), None  # no mask applied: nothing to cross-check
        if ahead.masked:
            # On a copy: the checkpoint is never advanced, so a broken rollback cannot reach it.
            copy = ahead.checkpoint.fork()
            probe = probe_mask(copy, allowed, chosen=token, top=top, index=ahead.index)
            if self.follower is not None:  # in the state this step's mask was computed in
                probs = view.probs if view.probs is not None else view.known
                comparison = self.follower.compare(words, probs, copy.probe_token)
        record = self._record(ahead, token, forced, raw, view, probe, terminated, comparison)
        if self._segments is not None:  # a tag: where in it, read from the text so far
            where = self._segments.at(ahead.output, self.reasoning)
            record = dataclasses.replace(
                record, segment=where.segment, depth=where.depth, path=where.path
            )
        return record

    def _state_at(self, position: JsonPosition) -> GrammarState:
        is_json = self.grammar.spec.is_json
        return GrammarState(
            depth=position.depth,
            path=position.path if is_json else "",
            rules=tuple(self._masking.active_rules()),
        )

    def _output_bytes(self) -> bytes:
        """The generated bytes as the reasoning boundary reads them (markers may be special
        tokens: their bytes count; a stop token's do not)."""
        if not self.reasoning.gates and self._segments is None:
            return b""
        return b"".join(self._reasoning_bytes(s.token_id) for s in self.steps)

    def _reasoning_bytes(self, token: int) -> bytes:
        if not self.reasoning.gates and self._segments is None:
            return b""
        return b"" if token in self._tokens.stop_ids else self._tokens.token_bytes[token]

    def _accept(self, token: int, ahead: Prepared) -> int:
        """Feed the step's token to the matcher: the matcher steps taken, -1 when refused.

        An unmasked step feeds nothing, unless its token ends the reasoning: then the content
        after the boundary (see :mod:`app.engine.grammars.reasoning`), refused like any token.
        """
        if ahead.masked:
            return 1 if self._masking.accept_token(token) else -1
        data = b"" if token in self._tokens.stop_ids else self._tokens.token_bytes[token]
        fed = self.reasoning.fed_after(ahead.output, data)
        if not fed:
            return 0
        return self._masking.accept_bytes(fed) or -1

    def _context(self) -> list[int]:
        """The prompt's ids and the tokens taken so far: what drafts are looked up in."""
        return [*self.prompt.token_ids, *(s.token_id for s in self.steps)]

    def _drop_checkpoints(self, *, after: int | None = None, before: int | None = None) -> None:
        for index in list(self._checkpoints):
            if (after is not None and index > after) or (before is not None and index < before):
                del self._checkpoints[index]

    def _record(
        self,
        ahead: Prepared,
        token: int,
        forced: bool,
        raw: RawDistribution,
        view: MaskedDistribution,
        probe: Probe,
        terminated: bool,
        follower: FollowerRecord | None,
    ) -> StepRecord:
        return StepRecord(
            index=ahead.index,
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
            bitmask=bitmask_bytes(ahead.bitmask[0]),
            depth=ahead.before.depth,
            path=ahead.before.path,
            rules=ahead.before.rules,
            jump_forward=ahead.jump_forward,
            probe=probe,
            mask_accept_agree=not probe.disagree,
            engine=self._masking.name,
            forward_ms=raw.forward_ms,
            mask_us=ahead.mask_us,
            total_ms=0.0,  # set once the step's call ends
            terminated=terminated,
            # A remote engine's record states which figures are bounds; a local one's are exact.
            inexact=_inexact(token, view) if view.reports_bounds else None,
            blocked_mass_max=view.blocked_mass_max if view.reports_bounds else None,
            allowed_tokens=view.allowed_tokens,
            follower=follower,
            drafts=ahead.drafts,
            rollback=ahead.rollback,
            masked=ahead.masked,
            classes=self._classes(ahead) if ahead.masked else None,
            straddle=None if ahead.masked else self._straddle(ahead, token),
            emptied_by_processors=ahead.masked
            and view.allowed_count > 0
            and self._emptied_by_processors(ahead),
        )

    def _straddle(self, ahead: Prepared, token: int) -> Straddle | None:
        """The token's split, when it completes the reasoning's end marker and carries bytes of
        both sides (``></`` after ``</think``: ``>`` ends the marker, ``</`` is content)."""
        data = self._reasoning_bytes(token)
        found = self.reasoning.boundary(ahead.output + data)
        if found is None:
            return None
        cut = found.content_from - len(ahead.output)
        if not 0 < cut < len(data):
            return None
        text = functools.partial(bytes.decode, encoding="utf-8", errors="replace")
        return Straddle("reasoning_end", found.marker.text, text(data[:cut]), text(data[cut:]))

    def _emptied_by_processors(self, ahead: Prepared) -> bool:
        """Whether ``min_tokens``' processor leaves step ``ahead.index`` no token at all."""
        if self._end is None or ahead.index >= self._end.rules.min_tokens:
            return False
        allowed = allowed_array(ahead.bitmask[0], self._tokens.vocab_size).copy()
        stops = [i for i in self._end.stops.to_xgrammar if i < self._tokens.vocab_size]
        allowed[stops] = False
        return not bool(allowed.any())

    def _classes(self, ahead: Prepared) -> dict[str, int]:
        return class_counts(ahead.bitmask[0].numpy(), self._tokens)

    def _stop_reason(
        self, index: int, token: int, accepted: bool, terminated: bool
    ) -> StopReason | None:
        if not accepted:
            return StopReason.REJECTED
        if terminated:
            return StopReason.TERMINATED
        if token in self._tokens.stop_ids:
            return StopReason.EOS
        if self._end is not None and self._stopped_by_rules(index, token):
            return StopReason.STOP
        if index + 1 >= self.max_tokens:
            return StopReason.MAX_TOKENS
        return None

    def _after_processors(self, bitmask: torch.Tensor, index: int) -> torch.Tensor:
        """The mask the token is chosen under: the grammar's, then ``min_tokens``' processor."""
        if self._end is None or index >= self._end.rules.min_tokens:
            return bitmask
        cleared: torch.Tensor = without_stops(
            bitmask, self._end.stops.to_xgrammar, self._tokens.vocab_size
        )
        return cleared

    def _stopped_by_rules(self, index: int, token: int) -> bool:
        assert self._end is not None
        rules = self._end.rules
        if token in rules.stop_token_ids:
            return True
        if not rules.stop or index + 1 <= rules.min_tokens:
            return False
        taken = [s.token_id for s in self.steps] + [token]
        start = sum(len(self._tokens.output_bytes(t)) for t in taken[: rules.min_tokens])
        text = b"".join(self._tokens.output_bytes(t) for t in taken)
        return first_stop_string(text, start, rules.stop) is not None

    def end_report(self) -> EndReport | None:
        """The end of generation over the steps taken and the next step's mask, when the session
        has end rules (``min_tokens``, stop ids, stop strings)."""
        if self._end is None:
            return None
        walk = EndWalk(self._tokens, self._end.rules, self._end.stops)
        for record in self.steps:
            allowed = None
            if record.masked:
                words = torch.from_numpy(words_from_bytes(record.bitmask).copy())
                allowed = allowed_array(words, self._tokens.vocab_size)
            walk.step(record.index, allowed, record.token_id)
        ahead = self._ahead
        if ahead is not None and ahead.masked and self.stop_reason is None:
            walk.step(ahead.index, allowed_array(ahead.bitmask[0], self._tokens.vocab_size), None)
        return walk.report()


@dataclass(slots=True)
class _Beside:
    """What a step's work beside the next forward pass produced (read once it has ended)."""

    position: JsonPosition = dataclasses.field(default_factory=JsonPosition)
    next: Prepared | None = None
    record: StepRecord | None = None
    nbytes: int = 0
    #: the follower took the step (a failed step undoes it)
    followed: bool = False


def _inexact(token: int, view: MaskedDistribution) -> tuple[str, ...]:
    return view.inexact if view.rank_exact(token) else (*view.inexact, "rank")
