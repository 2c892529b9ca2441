"""Plain records the engine returns: steps, replays, validations. Templates and JSON render them.

Field meanings are the public contract (``shared/API.md``, "Step record" and "Replay"). The
validation records live in :mod:`app.verdicts` (the sandbox returns them too) and are re-exported.
"""

from __future__ import annotations

import base64
import dataclasses
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.verdicts import Validation, ValidationError

if TYPE_CHECKING:
    from app.engine.mask_summary import MaskSummary

__all__ = [
    "Disagreement",
    "DraftsRecord",
    "FollowerRecord",
    "GrammarState",
    "Probe",
    "Refusal",
    "Rejection",
    "RollbackRecord",
    "ReplayResult",
    "ReplayToken",
    "ReplayVerdict",
    "Segment",
    "StepRecord",
    "Straddle",
    "TIMING_FIELDS",
    "VOLATILE_FIELDS",
    "TopDifference",
    "TopToken",
    "Validation",
    "ValidationError",
]

#: The timings of a step.
TIMING_FIELDS = frozenset({"forward_ms", "mask_us", "total_ms"})
#: Fields that may differ between two runs of the same step: the timings, and ``rollback`` (a
#: step taken again after a back has one; the first run of it had none).
VOLATILE_FIELDS = TIMING_FIELDS | {"rollback"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


#: Each type's dataclass field names (none for other types): a step's record is measured once,
#: about a hundred objects, and ``dataclasses.fields`` builds its answer anew at every call.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _deep_size(value: Any) -> int:
    """Bytes held by ``value`` and what it references (records are trees: nothing is shared)."""
    size = sys.getsizeof(value)
    kind = type(value)
    names = _FIELD_NAMES.get(kind)
    if names is None:
        fields = dataclasses.fields(kind) if dataclasses.is_dataclass(kind) else ()
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields)
    if names:
        size += sum(_deep_size(getattr(value, name)) for name in names)
    elif isinstance(value, tuple | list):
        size += sum(_deep_size(item) for item in value)
    elif isinstance(value, dict):
        size += sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    return size


@dataclass(frozen=True, slots=True)
class TopToken:
    """One candidate of the raw (unmasked, temperature 1) distribution.

    ``logit`` is None when the engine returns log-probabilities, not logits (a remote engine).
    """

    token_id: int
    text: str
    prob: float
    logit: float | None
    allowed: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (spelled out: ``dataclasses.asdict`` costs ten times as much, and a
        step's record holds a dozen of these)."""
        return {"token_id": self.token_id, "text": self.text, "prob": self.prob,
                "logit": self.logit, "allowed": self.allowed}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A token whose mask bit and ``accept_token`` answer differ."""

    token_id: int
    mask: bool
    accept: bool


@dataclass(frozen=True, slots=True)
class Probe:
    """The mask/accept cross-check of one step: how many tokens were tried, which disagreed."""

    checked: int
    disagree: tuple[Disagreement, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"checked": self.checked, "disagree": [dataclasses.asdict(d) for d in self.disagree]}


@dataclass(frozen=True, slots=True)
class DraftsRecord:
    """The speculative drafts of one step, validated the way vLLM's ``grammar_bitmask`` does.

    Attributes:
        proposed: draft tokens proposed for this step (prompt lookup, without the mask).
        accepted: how many of them the grammar took in turn before the first it refused (the
            matcher was advanced by these, then rolled back before the real step).
    """

    proposed: int
    accepted: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RollbackRecord:
    """Whether a rollback restored the matcher: its state after the rollback against a copy of
    the matcher taken before the tokens were advanced.

    Attributes:
        checked: a copy of the state was at hand (always, today).
        differs: the token ids whose mask bits differ between the two, in id order.
        jump_forward_differs: the jump-forward strings differ.
        terminated_differs: the terminated flags differ.
    """

    checked: bool
    differs: tuple[int, ...] = ()
    jump_forward_differs: bool = False
    terminated_differs: bool = False

    @property
    def restored(self) -> bool:
        """Whether the rollback restored everything compared."""
        return not (self.differs or self.jump_forward_differs or self.terminated_differs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**dataclasses.asdict(self), "differs": list(self.differs)}


@dataclass(frozen=True, slots=True)
class GrammarState:
    """Where the parser is: JSON depth and path (JSON output only) and the active rules."""

    depth: int
    path: str
    rules: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"depth": self.depth, "path": self.path, "rules": list(self.rules)}


@dataclass(frozen=True, slots=True)
class TopDifference:
    """A token that one engine allows and the other blocks, with its raw probability."""

    token_id: int
    text: str
    prob: float
    driver: bool
    follower: bool


@dataclass(frozen=True, slots=True)
class FollowerRecord:
    """The following engine's view of one step (compare mode), against the driving engine's.

    Attributes:
        engine: the follower's library.
        allowed_count: tokens the follower's mask allows (0 once it has ended).
        only_driver: tokens the driver allows and the follower blocks.
        only_follower: tokens the follower allows and the driver blocks.
        mask_only: how many of those differing tokens the engine whose mask blocks them would
            still accept (llguidance's mask leaves out non-canonical spellings of forced text):
            a difference of masks, not of languages.
        top_differences: the most probable of those tokens (raw distribution), most first.
        jump_forward: the follower's jump-forward string in this state.
        terminated: whether the follower terminated after this step's token.
        refused: why the follower ended: it refused the token the driver took at step
            ``ended_at`` (kept on every later step); None while it follows.
        ended_at: the step at which the follower refused the driver's token, or None.
        diverged: the languages differ at this step (a differing token that is not
            ``mask_only``), or the jump-forward strings or termination do, or the follower
            refused its token.
    """

    engine: str
    allowed_count: int
    only_driver: int
    only_follower: int
    mask_only: int
    top_differences: tuple[TopDifference, ...]
    jump_forward: str
    terminated: bool
    refused: str | None
    ended_at: int | None
    diverged: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["top_differences"] = [dataclasses.asdict(t) for t in self.top_differences]
        return out


@dataclass(frozen=True, slots=True)
class Segment:
    """Which part of a structural tag's output a position is in, read from the text so far.

    Attributes:
        kind: ``text`` (free text), ``reasoning``, ``tag_begin``, ``tool_name``, ``arguments``
            or ``tag_end``.
        tag: the begin string of the tag being written (None outside a tag).
        tool: the function being called (None when not known yet, or outside a call).
        parameter: for the XML-like argument styles, the parameter being written.
    """

    kind: str
    tag: str | None = None
    tool: str | None = None
    parameter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Straddle:
    """A token that crosses a boundary: part of its bytes belong to each side.

    Attributes:
        boundary: which boundary: ``reasoning_end`` (the reasoning's end marker).
        marker: the marker the boundary is (``</think>``).
        before: the token's text on the near side (the reasoning's, never fed to the grammar).
        after: the token's text the grammar is fed (after an explicit end marker; from an
            implicit one's start, the marker included).
    """

    boundary: str
    marker: str
    before: str
    after: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """Everything known about one generation step; see ``shared/API.md`` for each field.

    ``inexact`` and ``blocked_mass_max`` are set by remote engines only (None otherwise, and left
    out of the JSON form): the fields whose value is a bound, and the upper bound of
    ``blocked_mass`` (equal to it when exact).
    """

    index: int
    token_id: int
    token_text: str
    token_bytes: bytes
    forced: bool
    prob: float
    rank: int
    top: tuple[TopToken, ...]
    blocked_mass: float
    allowed_count: int
    vocab_size: int
    bitmask: bytes
    depth: int
    path: str
    rules: tuple[str, ...]
    jump_forward: str
    probe: Probe
    mask_accept_agree: bool
    engine: str
    forward_ms: float
    mask_us: float
    total_ms: float
    terminated: bool
    inexact: tuple[str, ...] | None = None
    blocked_mass_max: float | None = None
    allowed_tokens: tuple[TopToken, ...] = ()
    follower: FollowerRecord | None = None
    drafts: DraftsRecord | None = None
    rollback: RollbackRecord | None = None
    masked: bool = True
    segment: Segment | None = None
    #: allowed tokens by class (keys: ``mask_summary.CLASS_KEYS``); None while unmasked
    classes: dict[str, int] | None = None
    #: the labels of the alarms that held at this step (see app.engine.stepper.breakpoints)
    alarms: tuple[str, ...] = ()
    #: the token crosses the reasoning's end: which of its bytes the grammar was fed
    straddle: Straddle | None = None
    #: the grammar allowed tokens, but ``min_tokens``' processor removed them all (only stops
    #: were allowed): with :attr:`empty_mask`, "empty mask: vLLM aborts this request"
    emptied_by_processors: bool = False

    #: the grammar's mask allowed no token here (``masked`` and ``allowed_count`` 0): set from
    #: those two, never given
    empty_mask: bool = dataclasses.field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "empty_mask", self.masked and self.allowed_count == 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: bytes as base64, tuples as lists; the remote-only fields when set."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["alarms"] = list(self.alarms)
        out["straddle"] = self.straddle.to_dict() if self.straddle else None
        out["segment"] = self.segment.to_dict() if self.segment else None
        if self.inexact is None:
            del out["inexact"], out["blocked_mass_max"]
        else:
            out["inexact"] = list(self.inexact)
        out["follower"] = self.follower.to_dict() if self.follower else None
        out["token_bytes"] = _b64(self.token_bytes)
        out["bitmask"] = _b64(self.bitmask)
        out["top"] = [t.to_dict() for t in self.top]
        out["allowed_tokens"] = [t.to_dict() for t in self.allowed_tokens]
        out["rules"] = list(self.rules)
        out["probe"] = self.probe.to_dict()
        out["drafts"] = self.drafts.to_dict() if self.drafts else None
        out["rollback"] = self.rollback.to_dict() if self.rollback else None
        return out

    def without_timings(self) -> dict[str, Any]:
        """The record minus the fields that may differ (:data:`VOLATILE_FIELDS`): what must
        repeat after a back-and-step-again."""
        return {k: v for k, v in self.to_dict().items() if k not in VOLATILE_FIELDS}

    def nbytes(self) -> int:
        """Memory this record holds (its bitmask, about 6 KB on a 49k vocabulary, dominates)."""
        return _deep_size(self)


@dataclass(frozen=True, slots=True)
class ReplayToken:
    """One token of a replay: whether the grammar accepted it, and the mask and parser state it
    was checked in (before it).

    ``bitmask`` is kept only for the tokens a caller asked for (``bitmask_for``): a replay of
    thousands of tokens would otherwise hold (and answer) kilobytes per token.
    """

    token_id: int
    text: str
    accepted: bool
    allowed_count: int
    depth: int
    path: str
    rules: tuple[str, ...]
    bitmask: bytes | None = None
    masked: bool = True
    segment: Segment | None = None
    #: allowed tokens by class (keys: ``mask_summary.CLASS_KEYS``); None while unmasked
    classes: dict[str, int] | None = None

    #: as :attr:`StepRecord.empty_mask`
    empty_mask: bool = dataclasses.field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "empty_mask", self.masked and self.allowed_count == 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``bitmask`` only when kept."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["segment"] = self.segment.to_dict() if self.segment else None
        if self.bitmask is None:
            del out["bitmask"]
        else:
            out["bitmask"] = _b64(self.bitmask)
        out["rules"] = list(self.rules)
        return out


@dataclass(frozen=True, slots=True)
class Rejection:
    """Where a replayed text leaves the grammar."""

    offset: int
    token_index: int
    token_text: str
    expected: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**dataclasses.asdict(self), "expected": list(self.expected)}


@dataclass(frozen=True, slots=True)
class Refusal:
    """The first refused token.

    Attributes:
        index: its position in the replayed ids (the text's tokens first).
        token_id: its id.
        token: its spelling in the model's tokenizer (special and added tokens by name).
        special: whether the tokenizer counts it special (its added-token flag, or a stop id).
        rules: the grammar rules active where it was refused (the state).
        after: the end of the text accepted before it.
        allowed: the mask there: the allowed ids when few, else the classes it blocks.
        allowed_tokens: the spellings of the allowed ids, when the summary lists them.
        cause: the refusal in the structural tag's terms (a JSON grammar's cause is in schema
            terms, found by the web layer from the schema); None when no rule applies.
    """

    index: int
    token_id: int
    token: str
    special: bool
    rules: tuple[str, ...]
    after: str
    allowed: MaskSummary
    allowed_tokens: tuple[str, ...] | None
    cause: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "index": self.index,
            "token_id": self.token_id,
            "token": self.token,
            "special": self.special,
            "rules": list(self.rules),
            "after": self.after,
            "allowed": self.allowed.to_dict(),
            "allowed_tokens": None if self.allowed_tokens is None else list(self.allowed_tokens),
            "cause": self.cause,
        }


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A text or token list walked through the grammar without a model."""

    accepted: bool
    complete: bool
    tokens: tuple[ReplayToken, ...]
    rejection: Rejection | None
    follower: ReplayVerdict | None = None
    refusal: Refusal | None = None
    #: under a serving stack: ``{"stack", "library", "version"}`` that filled the masks
    mask_by: dict[str, str] | None = None
    #: the end of generation (``stepper.stops.EndReport``'s JSON form), when rules were given
    end: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``mask_by`` only under a serving stack)."""
        out = {
            "accepted": self.accepted,
            "complete": self.complete,
            "tokens": [t.to_dict() for t in self.tokens],
            "rejection": self.rejection.to_dict() if self.rejection else None,
            "follower": self.follower.to_dict() if self.follower else None,
            "refusal": self.refusal.to_dict() if self.refusal else None,
        }
        if self.mask_by is not None:
            out["mask_by"] = dict(self.mask_by)
        if self.end is not None:
            out["end"] = self.end
        return out

    def verdict(self, engine: str) -> ReplayVerdict:
        """This replay's verdict, named after the engine that gave it."""
        return ReplayVerdict(engine, self.accepted, self.complete, self.rejection)


@dataclass(frozen=True, slots=True)
class ReplayVerdict:
    """A second engine's verdict on the same tokens (replay with ``compare``)."""

    engine: str
    accepted: bool
    complete: bool
    rejection: Rejection | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "engine": self.engine,
            "accepted": self.accepted,
            "complete": self.complete,
            "rejection": self.rejection.to_dict() if self.rejection else None,
        }
