"""Step records (``app/engine/records.py``): their JSON form and the memory they are counted at,
on records of the toy model's real xgrammar masks."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from app.engine import GrammarKind
from app.engine.records import TopToken
from tests.engine.toy_forward import toy_grammar, toy_session

SCHEMA = '{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}'


def _walked(value: Any) -> int:
    """What a record holds, found by walking every dataclass field afresh."""
    size = sys.getsizeof(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        size += sum(_walked(getattr(value, f.name)) for f in dataclasses.fields(value))
    elif isinstance(value, tuple | list):
        size += sum(_walked(item) for item in value)
    elif isinstance(value, dict):
        size += sum(_walked(k) + _walked(v) for k, v in value.items())
    return size


def test_a_top_token_s_json_form_holds_every_field() -> None:
    token = TopToken(token_id=7, text="x", prob=0.25, logit=None, allowed=True)
    assert token.to_dict() == dataclasses.asdict(token)
    assert list(token.to_dict()) == [f.name for f in dataclasses.fields(TopToken)]


def test_a_record_is_counted_at_what_it_holds() -> None:
    session, _ = toy_session(toy_grammar(GrammarKind.JSON_SCHEMA, SCHEMA), max_tokens=8)
    for record in session.run(6):
        assert record.top and record.nbytes() == _walked(record)
