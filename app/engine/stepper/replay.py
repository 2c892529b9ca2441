"""Walk a string or token ids through the grammar without a model: where does it leave it?"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

import torch

from app.engine.budget import checkpoint
from app.engine.grammars.reasoning import ReasoningGate, ReasoningMode
from app.engine.grammars.spec import CompileResult
from app.engine.jsonpath import JsonPosition, advance
from app.engine.mask import (
    allowed_array,
    allowed_vector,
    bitmask_bytes,
    count_allowed,
    new_bitmask,
)
from app.engine.mask_summary import class_counts
from app.engine.masking import MaskingEngine, new_masking
from app.engine.records import Rejection, ReplayResult, ReplayToken
from app.engine.stepper.refusal import explain_refusal
from app.engine.stepper.segments import SegmentTracker, Where
from app.engine.stepper.stops import EndWalk
from app.engine.tokens import Tokens
from app.exceptions import InvalidInput, ReplayTooLong

__all__ = ["replay", "verdict", "walked_ids"]

_EXPECTED_SAMPLE = 20


def walked_ids(
    tokens: Tokens, text: str | None, token_ids: Sequence[int] | None, max_tokens: int | None
) -> list[int]:
    """The ids a replay walks: the text's tokens, then ``token_ids`` (either may be absent).

    Raises:
        InvalidInput: neither is given, or an id is outside the vocabulary.
        ReplayTooLong: more than ``max_tokens`` ids.
    """
    if text is None and token_ids is None:
        raise InvalidInput("give text, token_ids, or both (the text first, then the ids)")
    given = list(token_ids or ())
    for position, token_id in enumerate(given):
        if not 0 <= token_id < tokens.vocab_size:
            raise InvalidInput(
                f"token_ids[{position}] = {token_id} is outside the vocabulary "
                f"(0..{tokens.vocab_size - 1})",
                pointer=f"/token_ids/{position}",
            )
    ids = (tokens.encode(text) if text else []) + given
    if max_tokens is not None and len(ids) > max_tokens:
        what = "token_ids has" if not text else "the text is" if not given else "text and ids are"
        raise ReplayTooLong(
            f"{what} {len(ids)} tokens; a replay walks at most {max_tokens}",
            pointer="/text" if token_ids is None else "/token_ids",
        )
    return ids


def _characters(data: bytes) -> int:
    """The code points ``data`` starts or holds (UTF-8 continuation bytes are not counted)."""
    return len(data) - sum(0x80 <= byte < 0xC0 for byte in data)


def _accepted_prefix(masking: MaskingEngine, tokens: Tokens, token_id: int) -> int:
    """How many leading bytes of a refused token the grammar would still take."""
    if token_id in tokens.special_ids:
        return 0
    data = tokens.token_bytes[token_id]
    for size in range(len(data) - 1, 0, -1):
        if masking.accepts_bytes(data[:size]):
            return size
    return 0


def _rejection(
    masking: MaskingEngine,
    tokens: Tokens,
    words: torch.Tensor,
    token_id: int,
    index: int,
    consumed: bytes,
) -> Rejection:
    """Where the grammar refused ``token_id`` (``words``: the mask of the state it was refused
    in)."""
    prefix = _accepted_prefix(masking, tokens, token_id)
    refused_at = consumed + tokens.token_bytes[token_id][:prefix]
    allowed = allowed_vector(words, tokens.vocab_size).nonzero().flatten().tolist()
    return Rejection(
        offset=len(refused_at.decode("utf-8", errors="ignore")),
        token_index=index,
        token_text=tokens.text(token_id),
        expected=tuple(tokens.shortest_texts(allowed, _EXPECTED_SAMPLE)),
    )


def _unmasked(
    tokens: Tokens, token_id: int, accepted: bool, where: Where | None, keep: bool
) -> ReplayToken:
    """A token taken while the reasoning was open: no mask applied, no state claimed."""
    return ReplayToken(
        token_id=token_id,
        text=tokens.text(token_id),
        accepted=accepted,
        allowed_count=tokens.vocab_size,
        depth=0,
        path="",
        rules=(),
        bitmask=bitmask_bytes(new_bitmask(tokens.vocab_size)[0]) if keep else None,
        masked=False,
        segment=where.segment if where else None,
    )


def _boundary_rejection(
    masking: MaskingEngine,
    tokens: Tokens,
    gate: ReasoningGate,
    token_id: int,
    index: int,
    whole: bytes,
    fed: bytes,
) -> Rejection:
    """Where the grammar refused what the reasoning's end fed it (``fed``), inside ``token_id``
    (``whole``: the output through it)."""
    bitmask = new_bitmask(tokens.vocab_size)
    masking.fill_next_token_bitmask(bitmask)
    prefix = next((n for n in range(len(fed) - 1, 0, -1) if masking.accepts_bytes(fed[:n])), 0)
    boundary = gate.boundary(whole)
    start = boundary.content_from if boundary else 0
    refused_at = whole[: start + max(0, prefix - len(gate.skeleton))]
    allowed = allowed_vector(bitmask[0], tokens.vocab_size).nonzero().flatten().tolist()
    return Rejection(
        offset=len(refused_at.decode("utf-8", errors="ignore")),
        token_index=index,
        token_text=tokens.text(token_id),
        expected=tuple(tokens.shortest_texts(allowed, _EXPECTED_SAMPLE)),
    )


def verdict(
    grammar: CompileResult, tokens: Tokens, *, text: str, max_tokens: int | None = None
) -> ReplayResult:
    """What :func:`replay` says of ``text`` (accepted, complete, the rejection), without the
    per-token states: no mask is computed but the one at a refused token, so it costs a few
    microseconds a token.

    Raises:
        ReplayTooLong: more tokens than ``max_tokens``.
    """
    ids = walked_ids(tokens, text, None, max_tokens)
    masking = new_masking(grammar)
    consumed = b""
    chars = 0
    for index, token_id in enumerate(ids):
        checkpoint(index, total=len(ids), chars=chars)
        if not masking.accept_token(token_id):
            # A refused token leaves the matcher as it was: the mask is that of the refusal.
            bitmask = new_bitmask(tokens.vocab_size)
            masking.fill_next_token_bitmask(bitmask)
            rejection = _rejection(masking, tokens, bitmask[0], token_id, index, consumed)
            return ReplayResult(False, False, (), rejection)
        data = tokens.output_bytes(token_id)
        consumed += data
        chars += _characters(data)
    return ReplayResult(True, masking.is_terminated() or masking.is_completed(), (), None)


def replay(
    grammar: CompileResult,
    tokens: Tokens,
    *,
    text: str | None = None,
    token_ids: Sequence[int] | None = None,
    bitmask_for: Collection[int] = (),
    max_tokens: int | None = None,
    reasoning: ReasoningMode | ReasoningGate = ReasoningMode.NONE,
    end: EndWalk | None = None,
) -> ReplayResult:
    """Feed ``text`` (tokenized as the model would), ``token_ids``, or both (the text's tokens
    first: a pasted output, then a logged batch) to a fresh matcher.

    Each token reports the state it was checked in: its mask, and the depth, JSON path and
    active rules before it. At the first refused token the walk stops; the rejection gives the
    offset (in code points) of the first refused character and a sample of what the grammar
    accepts, and the refusal explains it (the state, the mask in words, a tag's cause).

    Args:
        bitmask_for: the token indices whose packed bitmask is kept in the result (the others
            keep only their allowed count); indices past the tokens walked are ignored.
        max_tokens: the most tokens walked; a longer input is refused before any is walked.
        reasoning: gates the mask as a session does (``mask_after_end``: the tokens before the
            end marker are ``masked: false``, not fed; the content after it is).
        end: fed each step's mask and token (and the mask after the last token), to report
            the end of generation (``min_tokens``, stop ids and strings) as vLLM decides it.

    Raises:
        InvalidInput: neither text nor token_ids, or an id outside the vocabulary (its
            position in the pointer).
        ReplayTooLong: more tokens than ``max_tokens``.
    """
    ids = walked_ids(tokens, text, token_ids, max_tokens)
    keep = frozenset(bitmask_for)
    masking = new_masking(grammar)
    bitmask = new_bitmask(tokens.vocab_size)
    position = JsonPosition()
    consumed = b""
    walked: list[ReplayToken] = []
    gate = (
        reasoning
        if isinstance(reasoning, ReasoningGate)
        else ReasoningGate.for_grammar(reasoning, grammar)
    )
    segments = SegmentTracker.for_grammar(grammar)
    seen = b""  # the bytes the reasoning boundary reads (special tokens' included)
    chars = 0
    for index, token_id in enumerate(ids):
        checkpoint(index, total=len(ids), chars=chars)
        data = b"" if token_id in tokens.stop_ids else tokens.token_bytes[token_id]
        where = segments.at(seen, gate) if segments is not None else None
        if gate.open_before(seen):
            fed = gate.fed_after(seen, data)
            accepted = not fed or masking.accept_bytes(fed) > 0
            walked.append(_unmasked(tokens, token_id, accepted, where, index in keep))
            if end is not None:
                end.step(index, None, token_id)
            if not accepted:
                assert fed is not None
                rejection = _boundary_rejection(
                    masking, tokens, gate, token_id, index, seen + data, fed
                )
                return ReplayResult(False, False, tuple(walked), rejection)
            consumed += tokens.output_bytes(token_id)
            seen += data
            chars += _characters(data)
            continue
        seen += data
        chars += _characters(data)
        before, rules = position, tuple(masking.active_rules())
        masking.fill_next_token_bitmask(bitmask)
        words = bitmask[0]
        accepted = masking.accept_token(token_id)
        if end is not None:
            end.step(index, allowed_array(words, tokens.vocab_size), token_id if accepted else None)
        if accepted and grammar.spec.is_json:
            position = advance(position, tokens.output_bytes(token_id))
        walked.append(
            ReplayToken(
                token_id=token_id,
                text=tokens.text(token_id),
                accepted=accepted,
                allowed_count=count_allowed(words, tokens.vocab_size),
                depth=before.depth,
                path=before.path if grammar.spec.is_json else "",
                rules=rules,
                bitmask=bitmask_bytes(words) if index in keep else None,
                segment=where.segment if where else None,
                classes=class_counts(words.numpy(), tokens),
            )
        )
        if where is not None:  # a tag: the JSON position inside its arguments
            walked[-1] = dataclasses.replace(walked[-1], depth=where.depth, path=where.path)
        if not accepted:
            rejection = _rejection(masking, tokens, words, token_id, index, consumed)
            refusal = explain_refusal(
                grammar, masking, tokens, words, token_id=token_id, index=index, consumed=consumed
            )
            return ReplayResult(False, False, tuple(walked), rejection, refusal=refusal)
        consumed += tokens.output_bytes(token_id)
    complete = masking.is_terminated() or masking.is_completed()
    if end is not None and not masking.is_terminated():
        masking.fill_next_token_bitmask(bitmask)  # the state after the last token
        end.step(len(ids), allowed_array(bitmask[0], tokens.vocab_size), None)
    return ReplayResult(True, complete, tuple(walked), None)
