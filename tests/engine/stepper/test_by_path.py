"""The per-path table: rows named after the path (and the tool argument), sums of the records."""

from __future__ import annotations

import dataclasses

import pytest

from app.engine import GrammarKind
from app.engine.records import Segment, StepRecord
from app.engine.stepper.by_path import by_path, place_of
from tests.engine.toy_forward import toy_grammar, toy_session

RECORD = toy_session(toy_grammar(GrammarKind.JSON_SCHEMA, '{"type": "integer"}'))[0].step()


def _at(path: str, segment: Segment | None = None, **fields: object) -> StepRecord:
    return dataclasses.replace(RECORD, path=path, segment=segment, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "place"),
    [
        (_at("$.a[2]"), "$.a[2]"),
        (_at(""), "(text)"),
        (_at("", Segment("text")), "(text)"),
        (_at("$.city", Segment("arguments", "<tool_call>", "get_weather")), "get_weather $.city"),
        (_at("", Segment("arguments", "<function=f>", "f", "city")), "f(city)"),
        (_at("", Segment("tool_name", "<tool_call>")), "(text)"),
    ],
)
def test_each_step_counts_in_its_place(record: StepRecord, place: str) -> None:
    assert place_of(record) == place


def test_the_rows_add_up_the_records_most_mass_removed_first() -> None:
    top = RECORD.top[0]
    blocked = (dataclasses.replace(top, allowed=False), *RECORD.top[1:])
    allowed = (dataclasses.replace(top, allowed=True), *RECORD.top[1:])
    records = [
        _at("$.a", index=0, blocked_mass=0.25, top=blocked, forced=False),
        _at("$.b", index=1, blocked_mass=0.5, top=allowed, forced=True),
        _at("$.a", index=2, blocked_mass=0.5, top=blocked, forced=True),
    ]
    rows = [r.to_dict() for r in by_path(records)]
    assert rows == [
        {"path": "$.a", "tokens": 2, "top1_blocked": 2, "removed_mass": 0.75, "forced": 1,
         "steps": [0, 2]},
        {"path": "$.b", "tokens": 1, "top1_blocked": 0, "removed_mass": 0.5, "forced": 1,
         "steps": [1]},
    ]  # fmt: skip
