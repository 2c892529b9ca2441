"""Breakpoints and alarms on the toy model: each condition stops the run at the step the test
finds itself in the records of the same run taken without it, never earlier."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from app.engine import GrammarKind
from app.engine.mask_summary import DIGITS, WHITESPACE
from app.engine.records import StepRecord
from app.engine.stepper.breakpoints import (
    DEFAULT_ALARMS,
    ONLY_RUN_STEPS,
    Break,
    Watch,
    breakpoint_from,
)
from app.engine.stepper.session import Session
from app.exceptions import InvalidInput
from tests.engine.faults import flip_bit
from tests.engine.toy_forward import VOCAB, ToyModel, toy_grammar, toy_session

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "array", "items": {"type": "integer"}},
        "b": {"type": "string"},
    },
    "required": ["a", "b"],
}
JSON = toy_grammar(GrammarKind.JSON_SCHEMA, json.dumps(SCHEMA))
ONE, HELLO = VOCAB.index("1"), VOCAB.index("hello")
# "hello" is the model's favourite where the grammar refuses it (steps 1-3), then "1" (steps
# 4-24): the number in $.a runs away until the favour ends.
FAVOUR = {1: HELLO, 2: HELLO, 3: HELLO} | dict.fromkeys(range(4, 25), ONE)

Make = Callable[[], Session]


def _json(**options: Any) -> Make:
    return lambda: toy_session(JSON, model=ToyModel(FAVOUR), max_tokens=48, **options)[0]


def _regex(pattern: str, favour: dict[int, int] | None = None) -> Make:
    grammar = toy_grammar(GrammarKind.REGEX, pattern)
    return lambda: toy_session(grammar, model=ToyModel(favour), max_tokens=24)[0]


def _only(record: StepRecord, label: str) -> bool:
    classes = record.classes or {}
    return record.allowed_count > 0 and classes.get(label) == record.allowed_count


def _run(records: Sequence[StepRecord], i: int, k: int, test: Callable[[StepRecord], bool]) -> bool:
    return i + 1 >= k and all(test(r) for r in records[i + 1 - k : i + 1])


def _inside(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


def _flip_at(index: int, token: int) -> Callable[[torch.Tensor, int], None]:
    def let_through(bitmask: torch.Tensor, step: int) -> None:
        if step == index:
            flip_bit(bitmask, token)

    return let_through


# (session, breakpoint, whether it holds at step i of the records, found from their fields)
CASES: list[tuple[str, Make, dict[str, Any], Callable[[Sequence[StepRecord], int], bool]]] = [
    ("path", _json(), {"when": "path", "value": "$.b"}, lambda r, i: r[i].path == "$.b"),
    ("path_prefix", _json(), {"when": "path", "value": "$.a*"},
     lambda r, i: _inside(r[i].path, "$.a")),
    ("token_text", _json(), {"when": "token", "value": ","}, lambda r, i: r[i].token_text == ","),
    ("token_id", _json(), {"when": "token", "value": ONE}, lambda r, i: r[i].token_id == ONE),
    ("allowed_at_most", _json(), {"when": "allowed_at_most", "value": 1},
     lambda r, i: r[i].allowed_count <= 1),
    ("top1_blocked", _json(), {"when": "top1_blocked", "k": 3},
     lambda r, i: _run(r, i, 3, lambda s: not s.top[0].allowed)),
    ("removed_above", _json(), {"when": "removed_above", "value": 0.99},
     lambda r, i: r[i].blocked_mass > 0.99),
    ("jump_forward_over", _json(), {"when": "jump_forward_over", "value": 5},
     lambda r, i: len(r[i].jump_forward) > 5),
    ("runaway_number", _json(), {"when": "runaway_number", "k": 6},
     lambda r, i: _run(r, i, 6, lambda s: s.token_text.isdigit())),
    ("whitespace_only", _regex("a {5}b"), {"when": "whitespace_only", "k": 3},
     lambda r, i: _run(r, i, 3, lambda s: _only(s, WHITESPACE))),
    ("digits_only", _regex("x[0-9]{6}a"), {"when": "digits_only", "k": 4},
     lambda r, i: _run(r, i, 4, lambda s: _only(s, DIGITS))),
    ("runaway_whitespace", _regex("a {20}b", {i: VOCAB.index(" ") for i in range(1, 21)}),
     {"when": "runaway_whitespace", "k": 4},
     lambda r, i: _run(r, i, 4, lambda s: s.token_text == " ")),
    ("rollback_differs",
     lambda: toy_session(JSON, prompt='{"a": [1, 1], "b": "ab"}', max_tokens=48, draft_tokens=3,
                         broken_rollback=True)[0],
     {"when": "rollback_differs"},
     lambda r, i: (rb := r[i].rollback) is not None and not rb.restored),
]  # fmt: skip


def _until_break(session: Session) -> tuple[list[StepRecord], Break | None]:
    """Step until the watch reports a break or the session stops."""
    records: list[StepRecord] = []
    while not session.done:
        records.append(session.step())
        if session.watch.hit is not None:
            return records, session.watch.hit
    return records, None


def _watching(make: Make, *spec: dict[str, Any]) -> Session:
    session = make()
    session.watch = Watch([breakpoint_from(**s) for s in spec], defaults=DEFAULT_ALARMS)
    return session


@pytest.mark.parametrize(
    ("make", "spec", "holds"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_condition_stops_where_the_records_say_it_first_holds(
    make: Make, spec: dict[str, Any], holds: Callable[[Sequence[StepRecord], int], bool]
) -> None:
    reference = make().run(48)
    expected = next((i for i in range(len(reference)) if holds(reference, i)), None)
    assert expected is not None, "the case's run never meets its condition"
    records, hit = _until_break(_watching(make, spec))
    assert hit is not None and hit.index == expected == len(records) - 1
    assert hit.breakpoint.when == spec["when"]
    assert [r.without_timings() | {"alarms": []} for r in records] == [
        r.without_timings() | {"alarms": []} for r in reference[: expected + 1]
    ]


def test_a_disagreement_stops_at_the_step_whose_mask_lied() -> None:
    undisturbed = toy_session(JSON, model=ToyModel(FAVOUR), max_tokens=48, top_k=len(VOCAB))[0]
    reference = undisturbed.run(48)
    index, victim = next((r.index, r.top[0].token_id) for r in reference if not r.top[0].allowed)

    def make() -> Session:
        return toy_session(
            JSON, model=ToyModel(FAVOUR), max_tokens=48, top_k=len(VOCAB),
            after_fill=_flip_at(index, victim),
        )[0]  # fmt: skip

    records, hit = _until_break(_watching(make, {"when": "disagreement"}))
    assert hit is not None and hit.index == index and not records[index].mask_accept_agree
    marked = make().run(48)  # without the breakpoint, the default alarm marks the step
    assert [r.index for r in marked if "disagreement" in r.alarms] == [index]


def test_a_run_stops_where_a_condition_starts_to_hold_not_while_it_goes_on() -> None:
    session = _watching(_json(), {"when": "path", "value": "$.a[0]"})
    first, hit = _until_break(session)
    assert hit is not None and first[-1].path == "$.a[0]" and first[-2].path != "$.a[0]"
    rest, again = _until_break(session)
    assert again is None and session.done
    assert sum(r.path == "$.a[0]" for r in rest) > 1  # it held on, and the run went on


def test_continue_never_stops_again_at_the_same_step_but_a_plain_back_does() -> None:
    session = _watching(_json(), {"when": "token", "value": ","})
    records, hit = _until_break(session)
    assert hit is not None
    session.back(1)  # not passed: stepping it again stops there again
    again = session.step()
    assert session.watch.hit == hit and again.index == hit.index
    assert session.watch.resume() == hit
    session.back(1)
    session.step()
    assert session.watch.hit is None
    rest, later = _until_break(session)
    assert later is None or later.index > hit.index


@pytest.mark.parametrize(
    ("pattern", "when"), [("x[0-9]{12}a", "digits_only"), ("a {12}b", "whitespace_only")]
)
def test_the_default_alarms_mark_a_run_of_allowed_sets_without_stopping(
    pattern: str, when: str
) -> None:
    session = _regex(pattern)()
    records = session.run(48)
    # the grammar allows only digits (only " ") at steps 1 to 12, and at no other step
    key = DIGITS if when == "digits_only" else WHITESPACE
    assert [i for i, r in enumerate(records) if _only(r, key)] == list(range(1, 13))
    label = f"{when} k={ONLY_RUN_STEPS}"
    assert [r.index for r in records if label in r.alarms] == list(range(ONLY_RUN_STEPS, 13))
    assert session.watch.hit is None and session.done


def test_the_default_alarms_read_the_allowed_sets_not_the_tokens_taken() -> None:
    session = _json()()
    records = session.run(48)
    digits = [
        i for i in range(len(records)) if _run(records, i, 16, lambda s: s.token_text.isdigit())
    ]
    assert digits, "the run takes 16 digits running"  # each step allowed `,` or `]` besides
    assert not any(r.alarms for r in records)
    assert session.done


def test_alarm_only_marks_and_never_stops() -> None:
    session = _watching(_json(), {"when": "token", "value": ",", "alarm_only": True})
    records, hit = _until_break(session)
    assert hit is None and session.done
    assert [r.index for r in records if "token ," in r.alarms] == [
        r.index for r in records if r.token_text == ","
    ]


@pytest.mark.parametrize(
    ("spec", "pointer"),
    [
        ({"when": "nowhere"}, "/when"),
        ({"when": "path"}, "/value"),
        ({"when": "path", "value": 3}, "/value"),
        ({"when": "allowed_at_most", "value": -1}, "/value"),
        ({"when": "empty_mask", "value": 1}, "/value"),
        ({"when": "path", "value": "$", "k": 2}, "/k"),
        ({"when": "top1_blocked", "k": 0}, "/k"),
    ],
)
def test_a_bad_breakpoint_names_its_field(spec: dict[str, Any], pointer: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        breakpoint_from(**spec)
    assert caught.value.pointer == pointer


def test_an_empty_mask_is_what_the_record_says() -> None:
    record = _json()().step()
    condition = breakpoint_from("empty_mask").condition
    assert not condition.holds([record])
    assert condition.holds([dataclasses.replace(record, allowed_count=0)])
