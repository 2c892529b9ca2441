"""Breakpoints and alarms: conditions on a session's step records, evaluated after each step.

A condition reads the records so far (the step just taken last) and says whether it holds
there; it never derives again what a record states (the path, the classes of the allowed
tokens, the blocked mass...). A breakpoint pauses a run at a step where its condition starts to
hold (it did not at the step before); an alarm only marks the steps where its condition holds,
in the record's ``alarms``. A break passed with :meth:`Watch.resume` never stops the run again
at the same step, even after going back over it.

Every session watches :data:`DEFAULT_ALARMS` besides the breakpoints it was given: a run of
:data:`ONLY_RUN_STEPS` steps whose allowed set holds only whitespace, or only digits (read from the
records' allowed-token ``classes``, never from the tokens taken: #55313, #52011), an empty mask,
and a mask/accept disagreement. The timeline marks each alarm once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, overload

from app.engine.mask_summary import DIGITS, WHITESPACE, run_of
from app.engine.records import StepRecord
from app.exceptions import InvalidInput

__all__ = [
    "DEFAULT_ALARMS",
    "DIGIT_CLASS",
    "ONLY_RUN_STEPS",
    "RUNAWAY_STEPS",
    "WHEN",
    "WHITESPACE_CLASS",
    "Break",
    "Breakpoint",
    "Condition",
    "Watch",
    "breakpoint_from",
    "parse_breakpoint",
    "records_with",
    "with_alarms",
]

#: The key of the records' ``classes`` counting allowed tokens made of whitespace only.
WHITESPACE_CLASS = WHITESPACE
#: The key of the records' ``classes`` counting allowed tokens made of digits only.
DIGIT_CLASS = DIGITS
#: How many tokens taken running of whitespace (or digits) ``runaway_*`` calls a runaway.
RUNAWAY_STEPS = 16
#: How many steps running whose allowed set is whitespace only (or digits only) the default
#: alarms mark.
ONLY_RUN_STEPS = 8


class Condition(Protocol):
    """Something that holds, or not, at the last of the records so far."""

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """Whether the condition holds at ``records[-1]``, the step just taken."""
        ...


def _running(records: Sequence[StepRecord], k: int, test: Callable[[StepRecord], bool]) -> bool:
    """Whether ``test`` holds for each of the last ``k`` records (fewer: it does not)."""
    n = len(records)
    return n >= k and all(test(records[i]) for i in range(n - k, n))


@dataclass(frozen=True, slots=True)
class PathAt:
    """The step writes at JSON path ``value`` (``prefix``: or anywhere inside it)."""

    value: str
    prefix: bool = False

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        path = records[-1].path
        if path == self.value:
            return True
        return self.prefix and path.startswith(self.value) and path[len(self.value)] in ".["


@dataclass(frozen=True, slots=True)
class SegmentIs:
    """The step is in a structural tag's segment of kind ``value``, or in a call of tool
    ``value``."""

    value: str

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        segment = records[-1].segment
        return segment is not None and self.value in (segment.kind, segment.tool)


@dataclass(frozen=True, slots=True)
class TokenIs:
    """The step's token is ``value``: an id, or a spelling."""

    value: int | str

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        record = records[-1]
        if isinstance(self.value, int):
            return record.token_id == self.value
        return record.token_text == self.value


@dataclass(frozen=True, slots=True)
class AllowedAtMost:
    """The step's mask allows ``n`` tokens or fewer."""

    n: int

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return records[-1].allowed_count <= self.n


@dataclass(frozen=True, slots=True)
class OnlyClassAllowed:
    """For ``k`` steps running, every token the mask allows is of the class ``label`` (from
    the records' ``classes``: the allowed count of each class)."""

    label: str
    k: int = 1

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        n = len(records)
        # the run ending at the last record, read over its last k records only
        return n >= self.k and run_of(records[n - self.k :], self.label)[-1] >= self.k


def _top1_blocked(record: StepRecord) -> bool:
    return bool(record.top) and not record.top[0].allowed


@dataclass(frozen=True, slots=True)
class Top1Blocked:
    """The model's most probable token was blocked by the mask ``k`` steps running."""

    k: int = 1

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return _running(records, self.k, _top1_blocked)


@dataclass(frozen=True, slots=True)
class RemovedAbove:
    """The mask removed more than ``x`` of the raw probability at the step."""

    x: float

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return records[-1].blocked_mass > self.x


@dataclass(frozen=True, slots=True)
class EmptyMask:
    """The step's mask allowed nothing (the record's ``empty_mask``)."""

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return records[-1].empty_mask


@dataclass(frozen=True, slots=True)
class JumpForwardOver:
    """The jump-forward string at the step is longer than ``n`` characters."""

    n: int

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return len(records[-1].jump_forward) > self.n


@dataclass(frozen=True, slots=True)
class Disagreement:
    """The mask and ``accept_token`` disagreed on a token at the step."""

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return not records[-1].mask_accept_agree


@dataclass(frozen=True, slots=True)
class RollbackDiffers:
    """A rollback before the step left the matcher in a state that differs from the one
    before."""

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        rollback = records[-1].rollback
        return rollback is not None and not rollback.restored


def _all_whitespace(record: StepRecord) -> bool:
    return bool(record.token_bytes) and record.token_bytes.isspace()


def _all_digits(record: StepRecord) -> bool:
    return bool(record.token_bytes) and record.token_bytes.isdigit()


@dataclass(frozen=True, slots=True)
class Runaway:
    """The last ``k`` tokens taken are each made of whitespace only (``digits``: of digits
    only): the output runs away in blank space or an unbounded number."""

    digits: bool
    k: int = RUNAWAY_STEPS

    def holds(self, records: Sequence[StepRecord]) -> bool:
        """See :class:`Condition`."""
        return _running(records, self.k, _all_digits if self.digits else _all_whitespace)


#: Each ``when`` of a breakpoint: what its ``value`` is (``str``, ``int``, ``float``, ``id``
#: for an id or a spelling, None for no value) and whether it takes ``k``.
WHEN: dict[str, tuple[str | None, bool]] = {
    "path": ("str", False),
    "segment": ("str", False),
    "token": ("id", False),
    "allowed_at_most": ("int", False),
    "whitespace_only": (None, True),
    "digits_only": (None, True),
    "top1_blocked": (None, True),
    "removed_above": ("float", False),
    "empty_mask": (None, False),
    "jump_forward_over": ("int", False),
    "disagreement": (None, False),
    "rollback_differs": (None, False),
    "runaway_whitespace": (None, True),
    "runaway_number": (None, True),
}


def _condition(when: str, value: Any, k: int) -> Condition:
    builders: dict[str, Callable[[], Condition]] = {
        # ``$.items[3]*``: the path itself, or anywhere inside it
        "path": lambda: PathAt(value.removesuffix("*"), prefix=value.endswith("*")),
        "segment": lambda: SegmentIs(value),
        "token": lambda: TokenIs(value),
        "allowed_at_most": lambda: AllowedAtMost(value),
        "whitespace_only": lambda: OnlyClassAllowed(WHITESPACE_CLASS, k),
        "digits_only": lambda: OnlyClassAllowed(DIGIT_CLASS, k),
        "top1_blocked": lambda: Top1Blocked(k),
        "removed_above": lambda: RemovedAbove(value),
        "empty_mask": EmptyMask,
        "jump_forward_over": lambda: JumpForwardOver(value),
        "disagreement": Disagreement,
        "rollback_differs": RollbackDiffers,
        "runaway_whitespace": lambda: Runaway(digits=False, k=k),
        "runaway_number": lambda: Runaway(digits=True, k=k),
    }
    return builders[when]()


def _checked_value(when: str, kind: str | None, value: Any) -> Any:
    """``value`` as ``when`` takes it, or InvalidInput naming what is wrong."""
    if kind is None:
        if value is not None:
            raise InvalidInput(f"a {when} breakpoint takes no value", pointer="/value")
        return None
    if value is None:
        raise InvalidInput(f"a {when} breakpoint needs a value", pointer="/value")
    fits = {
        "str": isinstance(value, str) and bool(value),
        "int": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "id": isinstance(value, int | str) and not isinstance(value, bool) and value != "",
    }[kind]
    if not fits:
        wanted = {"str": "a string", "int": "an integer >= 0", "float": "a number",
                  "id": "a token id or a token's text"}[kind]  # fmt: skip
        raise InvalidInput(f"a {when} breakpoint's value must be {wanted}, got {value!r}",
                           pointer="/value")  # fmt: skip
    return float(value) if kind == "float" else value


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """A condition to stop at (or, ``alarm_only``, to mark), as the user wrote it.

    Attributes:
        when: the condition's name (a key of :data:`WHEN`).
        condition: the condition itself.
        value: its value, as given (None when it takes none).
        k: how many steps running it must hold (1 for a condition without ``k``).
        alarm_only: mark the steps where it holds, never stop.
    """

    when: str
    condition: Condition
    value: Any = None
    k: int = 1
    alarm_only: bool = False

    @property
    def label(self) -> str:
        """How the records' ``alarms`` and the ``break`` event name it: ``when``, its value,
        its ``k`` when more than one."""
        parts = [self.when]
        if self.value is not None:
            parts.append(str(self.value))
        if self.k != 1:
            parts.append(f"k={self.k}")
        return " ".join(parts)

    @property
    def text(self) -> str:
        """Its one-line form, ``WHEN[=VALUE][,k=K]`` (``alarm `` first when alarm only): what
        :func:`parse_breakpoint` reads."""
        out = self.when if self.value is None else f"{self.when}={self.value}"
        if WHEN[self.when][1] and self.k != _default_k(self.when):
            out += f",k={self.k}"
        return f"alarm {out}" if self.alarm_only else out

    def to_dict(self) -> dict[str, Any]:
        """The form a session request takes (and a permalink keeps)."""
        out: dict[str, Any] = {"when": self.when}
        if self.value is not None:
            out["value"] = self.value
        if WHEN[self.when][1]:
            out["k"] = self.k
        if self.alarm_only:
            out["alarm_only"] = True
        return out


def breakpoint_from(
    when: str, value: Any = None, k: int | None = None, *, alarm_only: bool = False
) -> Breakpoint:
    """A breakpoint from its request form.

    Raises:
        InvalidInput: an unknown ``when``, a value of the wrong kind (or one missing, or given
            to a condition without one), or ``k`` given where it means nothing or below 1; the
            pointer names the field.
    """
    if when not in WHEN:
        raise InvalidInput(
            f"unknown breakpoint {when!r}; one of {', '.join(WHEN)}", pointer="/when"
        )
    kind, takes_k = WHEN[when]
    value = _checked_value(when, kind, value)
    if k is not None and not takes_k:
        raise InvalidInput(f"a {when} breakpoint takes no k", pointer="/k")
    if k is not None and k < 1:
        raise InvalidInput(f"k must be at least 1, got {k}", pointer="/k")
    k = k or _default_k(when)
    return Breakpoint(when, _condition(when, value, k), value, k, alarm_only)


def _default_k(when: str) -> int:
    return RUNAWAY_STEPS if when.startswith("runaway") else 1


def parse_breakpoint(text: str) -> Breakpoint:
    """A breakpoint from its one-line form, ``[alarm ]WHEN[=VALUE][,k=K]``: ``path=$.items[3]*``,
    ``top1_blocked,k=3``, ``alarm removed_above=0.9``.

    Raises:
        InvalidInput: an unknown condition, a value it does not take, a bad ``k``.
    """
    line = text.strip()
    alarm_only = line.startswith("alarm ")
    head, _, rest = line.removeprefix("alarm ").rpartition(",k=") if ",k=" in line else (
        line.removeprefix("alarm "), "", "")  # fmt: skip
    when, eq, raw = head.partition("=")
    when = when.strip()
    if rest and not rest.strip().isdigit():
        raise InvalidInput(f"{text!r}: k must be a count of steps, got {rest!r}", pointer="/k")
    kind = WHEN.get(when, (None, False))[0]
    value: int | float | str | None = raw if eq else None
    if eq and kind in ("int", "id") and raw.strip().lstrip("-").isdigit():
        value = int(raw)
    elif eq and kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise InvalidInput(f"{text!r}: {raw!r} is not a number", pointer="/value") from None
    try:
        return breakpoint_from(when, value, int(rest) if rest else None, alarm_only=alarm_only)
    except InvalidInput as error:
        raise InvalidInput(f"{text!r}: {error.message}", pointer=error.pointer) from None


#: The alarms every session watches: the "whitespace only" and "digits only" runs of the
#: allowed sets, an empty mask, a disagreement.
DEFAULT_ALARMS: tuple[Breakpoint, ...] = (
    breakpoint_from("whitespace_only", k=ONLY_RUN_STEPS, alarm_only=True),
    breakpoint_from("digits_only", k=ONLY_RUN_STEPS, alarm_only=True),
    breakpoint_from("empty_mask", alarm_only=True),
    breakpoint_from("disagreement", alarm_only=True),
)


@dataclass(frozen=True, slots=True)
class Break:
    """Where a run stopped: the step, and the breakpoint whose condition started to hold."""

    index: int
    breakpoint: Breakpoint

    def to_dict(self) -> dict[str, Any]:
        """The ``break`` event's data: ``{"index", "when", "label", "value"}``."""
        bp = self.breakpoint
        return {"index": self.index, "when": bp.when, "label": bp.label, "value": bp.value}


class _Appended(Sequence[StepRecord]):
    """``records`` with ``last`` after them, without copying the list."""

    __slots__ = ("_records", "_last")

    def __init__(self, records: Sequence[StepRecord], last: StepRecord) -> None:
        self._records, self._last = records, last

    def __len__(self) -> int:
        return len(self._records) + 1

    @overload
    def __getitem__(self, i: int) -> StepRecord: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[StepRecord]: ...
    def __getitem__(self, i: int | slice) -> StepRecord | Sequence[StepRecord]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self._records)
        if i < 0:
            i += n + 1
        if i == n:
            return self._last
        if not 0 <= i < n:
            raise IndexError(i)
        return self._records[i]


def records_with(records: Sequence[StepRecord], last: StepRecord) -> Sequence[StepRecord]:
    """``records`` followed by ``last``: the records so far once ``last`` is taken."""
    return _Appended(records, last)


class Watch:
    """The breakpoints and alarms of one session, and what held at each of its steps.

    Args:
        breakpoints: the session's breakpoints and alarms, as given.
        defaults: the alarms watched besides them (:data:`DEFAULT_ALARMS`).
    """

    def __init__(
        self, breakpoints: Iterable[Breakpoint] = (), *, defaults: Iterable[Breakpoint] = ()
    ) -> None:
        self.breakpoints = tuple(breakpoints)
        given = {b.label for b in self.breakpoints}
        self._watched = self.breakpoints + tuple(d for d in defaults if d.label not in given)
        # The labels of the breakpoints (not alarms) that held at each step, by index.
        self._held: list[frozenset[str]] = []
        self._passed: set[tuple[int, str]] = set()
        #: the break at the last step taken, until the next step (or a back before it)
        self.hit: Break | None = None

    def evaluate(self, records: Sequence[StepRecord]) -> tuple[str, ...]:
        """Evaluate every condition at ``records[-1]``, the step just taken; sets :attr:`hit`.

        Returns:
            The labels of the alarms that hold there (the record's ``alarms``).
        """
        index = len(records) - 1
        del self._held[index:]
        holding = [w for w in self._watched if w.condition.holds(records)]
        alarms = tuple(w.label for w in holding if w.alarm_only)
        held = {w.label for w in holding if not w.alarm_only}
        before = self._held[index - 1] if index else frozenset()
        self._held.append(frozenset(held))
        started = [b for b in self.breakpoints if b.label in held and b.label not in before]
        self.hit = next(
            (Break(index, b) for b in started if (index, b.label) not in self._passed), None
        )
        return alarms

    def truncate(self, steps: int) -> None:
        """The session went back to ``steps`` steps: forget what held after them."""
        del self._held[steps:]
        if self.hit is not None and self.hit.index >= steps:
            self.hit = None

    def resume(self) -> Break | None:
        """Pass the break at the last step: it never stops a run at that step again."""
        hit, self.hit = self.hit, None
        if hit is not None:
            self._passed.add((hit.index, hit.breakpoint.label))
        return hit


def with_alarms(record: StepRecord, alarms: tuple[str, ...]) -> StepRecord:
    """``record`` with its ``alarms`` set (unchanged when it has that field's value)."""
    if record.alarms == alarms:
        return record
    return dataclasses.replace(record, alarms=alarms)
