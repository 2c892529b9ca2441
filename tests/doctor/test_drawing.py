"""Documents drawn from a schema alone: regex matches, valid instances, undeclared properties."""

from __future__ import annotations

import json
import random
import re

import pytest

from app.doctor.instances import GiveUp, InstanceDrawer, Undeclared, without_undeclared
from app.doctor.judge import Judge
from app.doctor.regex_sample import Unsupported, sample_regex
from app.examples import EXAMPLES_DIR


@pytest.mark.parametrize(
    "pattern",
    [r"^[A-Z]{4}[0-9]{2}$", r"^u[0-9]{3,8}$", r"(ab|c)+\d?\s*x", r"[^a-c]{2}\.\w+",
     r"^(\d{3})-\1$", r"colou?r"],
)  # fmt: skip
def test_a_sampled_string_matches_its_pattern(pattern: str) -> None:
    rng = random.Random(7)
    for _ in range(20):
        assert re.search(pattern, sample_regex(pattern, rng))


def test_lookarounds_and_broken_patterns_are_not_drawn() -> None:
    with pytest.raises(Unsupported):
        sample_regex(r"(?=a)a", random.Random(0))
    with pytest.raises(Unsupported):
        sample_regex(r"(", random.Random(0))
    with pytest.raises(Unsupported, match="longer than maxLength"):
        sample_regex(r"a{5}", random.Random(0), max_length=3)


@pytest.mark.parametrize("name", ["pricing", "router", "candidate", "risk", "nested"])
def test_draws_from_the_examples_are_valid(name: str) -> None:
    schema = json.loads((EXAMPLES_DIR / f"{name}.json").read_text())
    judge = Judge(schema)
    drawn = [InstanceDrawer(schema, random.Random(i)).draw() for i in range(30)]
    assert all(judge.value(d) == () for d in drawn)
    assert len({json.dumps(d) for d in drawn}) > 20  # varied, not one document


def test_objects_keep_the_schema_property_order() -> None:
    schema = {"properties": {"z": {"const": 1}, "a": {"const": 2}, "m": {"const": 3}},
              "required": ["z", "a", "m"], "additionalProperties": False}  # fmt: skip
    assert list(InstanceDrawer(schema, random.Random(0)).draw()) == ["z", "a", "m"]


def test_undeclared_properties_are_marked_and_can_be_stripped() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    drawn = [InstanceDrawer(schema, random.Random(i)).draw() for i in range(20)]
    extra = next(d for d in drawn if isinstance(d, Undeclared) and d.undeclared)
    assert set(without_undeclared(extra)) == {"a"}
    closed = {**schema, "additionalProperties": False}
    assert all(set(InstanceDrawer(closed, random.Random(i)).draw()) == {"a"} for i in range(20))


def test_an_unsatisfiable_draw_gives_up() -> None:
    with pytest.raises(GiveUp):
        InstanceDrawer({"type": "integer", "minimum": 5, "maximum": 1}, random.Random(0)).draw()
    with pytest.raises(GiveUp):
        InstanceDrawer(False, random.Random(0)).draw()
