"""The same source under two stacks (``POST /api/diff``, ``python -m app diff``): the tag each
release builds, the grammar its backend masks with, every step of a walk whose masks differ, and
(where the web layer runs the Doctor on each side) the Doctor's rows that differ.

Each side is that stack's own work (:func:`walk_under`): a vLLM release's tag from its own
builder and its rows from its own ``StructuredOutputManager`` (:mod:`app.engine.stacks.replay`);
``maskscope``'s from the in-process compile and matcher. Nothing here derives a mask: the diff
compares the rows the two stacks filled, bit for bit.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine.grammars.reasoning import tag_of
from app.engine.grammars.spec import CompileResult, GrammarKind
from app.engine.grammars.tools.request import parse_tools
from app.engine.mask import words_from_bytes
from app.engine.records import ReplayResult
from app.engine.stack_pins import MASKSCOPE, ServeFlags
from app.engine.stacks import runner
from app.engine.stacks.diff_doctor import DoctorChange
from app.engine.stacks.replay import stack_walk
from app.engine.stepper.replay import replay, walked_ids
from app.engine.tokens import Tokens
from app.paths import escape_token
from app.settings import Settings

__all__ = [
    "OnlyOne",
    "PointerDiff",
    "StepDiff",
    "UpgradeDiff",
    "Walked",
    "compare_walks",
    "pointer_diff",
    "upgrade_diff",
    "walk_under",
]

#: Example texts listed for the tokens one stack allows at a step and the other does not.
EXAMPLES = 8


@dataclass(frozen=True)
class Walked:
    """One stack's work on the source: its tag (None when it builds none), the grammar its
    backend masks with, and the walk of the ids with every row kept."""

    stack: str
    tag: dict[str, Any] | None
    grammar_text: str
    result: ReplayResult


@dataclass(frozen=True)
class PointerDiff:
    """A value the two tags hold differently at ``pointer`` (None on a side that lacks it)."""

    pointer: str
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"pointer": self.pointer, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class OnlyOne:
    """The tokens one stack's row allows at a step and the other's blocks."""

    count: int
    examples: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"count": self.count, "examples": list(self.examples)}


@dataclass(frozen=True)
class StepDiff:
    """A step of the walk whose two rows differ (``token``: the one walked there)."""

    index: int
    token_id: int
    token: str
    only_a: OnlyOne
    only_b: OnlyOne

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "index": self.index,
            "token_id": self.token_id,
            "token": self.token,
            "only_a": self.only_a.to_dict(),
            "only_b": self.only_b.to_dict(),
        }


@dataclass(frozen=True)
class UpgradeDiff:
    """The two stacks' work compared.

    Attributes:
        stacks: the stacks, A then B.
        tag_diff: every JSON pointer at which the two tags differ (the whole tag at ``""``
            when one side builds none).
        grammar_diff: a unified diff of the two grammars the backends mask with ("" when equal).
        steps: each walked step whose rows differ, in order.
        first_step: the first of them, None when every row agrees.
        walks: each side's walk (its verdict, where it refused, who filled its rows).
        doctor_diff: the Doctor's rows that differ between the grammars the two backends
            compile (:mod:`app.engine.stacks.diff_doctor`); None when not examined.
    """

    stacks: tuple[str, str]
    tag_diff: tuple[PointerDiff, ...]
    grammar_diff: str
    steps: tuple[StepDiff, ...]
    first_step: int | None
    walks: tuple[ReplayResult, ReplayResult]
    doctor_diff: tuple[DoctorChange, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the contract's fields, and each side's verdict in ``walks``."""
        return {
            "stacks": list(self.stacks),
            "tag_diff": [d.to_dict() for d in self.tag_diff],
            "grammar_diff": self.grammar_diff,
            "doctor_diff": (
                None if self.doctor_diff is None else [c.to_dict() for c in self.doctor_diff]
            ),
            "steps": [s.to_dict() for s in self.steps],
            "first_step": self.first_step,
            "walks": [_verdict(stack, w) for stack, w in zip(self.stacks, self.walks, strict=True)],
        }


def _verdict(stack: str, walk: ReplayResult) -> dict[str, Any]:
    refused = walk.rejection.token_index if walk.rejection else None
    return {
        "stack": stack,
        "accepted": walk.accepted,
        "complete": walk.complete,
        "tokens": len(walk.tokens),
        "refused_at": refused,
        "cause": walk.refusal.cause if walk.refusal else None,
        "mask_by": walk.mask_by,
    }


def walk_under(
    settings: Settings,
    stack: str,
    grammar: CompileResult,
    tokens: Tokens,
    *,
    tokenizer: str,
    ids: Sequence[int],
    serve: ServeFlags | None = None,
) -> Walked:
    """What ``stack`` makes of ``grammar`` and does with ``ids``, every row kept.

    Under a vLLM release the tag of a ``tools`` source is that release's builder's and the rows
    are its scheduler's (``serve`` its flags); under ``maskscope`` both are the in-process ones.

    Raises:
        InvalidInput: no such stack, or an id outside the vocabulary.
        GrammarError: the stack refuses the request, or is unavailable.
    """
    every = range(len(ids))
    if stack == MASKSCOPE:
        walked = replay(grammar, tokens, token_ids=list(ids), bitmask_for=every)
        return Walked(stack, tag_of(grammar), grammar.grammar_text, walked)
    builder = runner(settings, stack)
    tag = tag_of(grammar)
    if grammar.spec.kind is GrammarKind.TOOLS:
        tag = builder.build(parse_tools(grammar.spec.source).request, tokenizer).tag
    walk = stack_walk(
        builder, grammar, tokens, tokenizer=tokenizer, ids=ids, bitmask_for=every, serve=serve
    )
    return Walked(stack, tag, walk.grammar_text, walk.result)


def upgrade_diff(
    settings: Settings,
    stacks: Sequence[str],
    grammar: CompileResult | Sequence[CompileResult],
    tokens: Tokens,
    *,
    tokenizer: str,
    text: str | None = None,
    token_ids: Sequence[int] | None = None,
    serve: ServeFlags | None | Sequence[ServeFlags | None] = None,
) -> UpgradeDiff:
    """``grammar`` under the two ``stacks`` (A then B), with ``text`` then ``token_ids`` walked
    (neither given: the tags and grammars alone), compared (:func:`compare_walks`).

    ``grammar`` and ``serve`` are one for both stacks, or one per stack (a pasted request, which
    each stack derives with its own code).

    Raises:
        InvalidInput: no such stack, or an id outside the vocabulary.
        ReplayTooLong: more ids than a replay walks.
        GrammarError: a stack refuses the request, or is unavailable.
    """
    ids: list[int] = []
    if text is not None or token_ids is not None:
        ids = walked_ids(tokens, text, token_ids, settings.replay_token_cap)
    grammars = grammar if isinstance(grammar, Sequence) else [grammar] * len(stacks)
    serves = serve if isinstance(serve, Sequence) else [serve] * len(stacks)
    a, b = (
        walk_under(settings, stack, each, tokens, tokenizer=tokenizer, ids=ids, serve=flags)
        for stack, each, flags in zip(stacks, grammars, serves, strict=True)
    )
    return compare_walks(a, b, tokens)


def pointer_diff(a: Any, b: Any, at: str = "") -> list[PointerDiff]:
    """Every JSON pointer below ``at`` where ``a`` and ``b`` differ, deepest first found: two
    objects by key, two arrays by index (the longer one's extra items each), else the values."""
    if isinstance(a, dict) and isinstance(b, dict):
        found: list[PointerDiff] = []
        for key in sorted(set(a) | set(b)):
            where = f"{at}/{escape_token(str(key))}"
            found += (
                pointer_diff(a.get(key), b.get(key), where)
                if key in a and key in b
                else [PointerDiff(where, a.get(key), b.get(key))]
            )
        return found
    if isinstance(a, list) and isinstance(b, list):
        found = []
        for index in range(max(len(a), len(b))):
            where = f"{at}/{index}"
            if index < len(a) and index < len(b):
                found += pointer_diff(a[index], b[index], where)
            else:
                found.append(PointerDiff(where, _item(a, index), _item(b, index)))
        return found
    return [] if a == b and type(a) is type(b) else [PointerDiff(at, a, b)]


def _item(items: list[Any], index: int) -> Any:
    return items[index] if index < len(items) else None


def compare_walks(a: Walked, b: Walked, tokens: Tokens) -> UpgradeDiff:
    """The tag, grammar and row differences of two stacks' walks of the same ids."""
    tag_diff = pointer_diff(a.tag, b.tag)
    grammar_diff = "".join(
        difflib.unified_diff(
            a.grammar_text.splitlines(keepends=True),
            b.grammar_text.splitlines(keepends=True),
            fromfile=a.stack,
            tofile=b.stack,
        )
    )
    steps: list[StepDiff] = []
    walked = zip(a.result.tokens, b.result.tokens, strict=False)
    for index, (first, second) in enumerate(walked):
        if first.bitmask is None or second.bitmask is None or first.bitmask == second.bitmask:
            continue
        one, other = _allowed(first.bitmask, tokens), _allowed(second.bitmask, tokens)
        steps.append(
            StepDiff(
                index=index,
                token_id=first.token_id,
                token=first.text,
                only_a=_only(one & ~other, tokens),
                only_b=_only(other & ~one, tokens),
            )
        )
    return UpgradeDiff(
        stacks=(a.stack, b.stack),
        tag_diff=tuple(tag_diff),
        grammar_diff=grammar_diff,
        steps=tuple(steps),
        first_step=steps[0].index if steps else None,
        walks=(a.result, b.result),
    )


def _allowed(bitmask: bytes, tokens: Tokens) -> np.ndarray:
    words = words_from_bytes(bitmask)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: tokens.vocab_size]
    allowed: np.ndarray = bits.view(np.bool_)
    return allowed


def _only(allowed: np.ndarray, tokens: Tokens) -> OnlyOne:
    ids = np.flatnonzero(allowed).tolist()
    return OnlyOne(len(ids), tuple(tokens.shortest_texts(ids, EXAMPLES)))
