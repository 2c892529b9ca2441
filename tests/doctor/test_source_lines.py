"""Editor lines of schema keywords: JSON sources, and Pydantic sources by field or class."""

from __future__ import annotations

from app.doctor.source_lines import json_lines, pydantic_lines
from app.examples import EXAMPLES_DIR

ROUTER = (EXAMPLES_DIR / "router.py").read_text()


def test_a_json_keyword_is_on_the_line_of_its_value() -> None:
    line_of = json_lines('{\n  "type": "array",\n  "uniqueItems": true\n}')
    assert line_of("/uniqueItems") == 3
    assert line_of("/type") == 2
    assert line_of("/missing") is None


def test_a_pydantic_keyword_is_on_its_field_or_else_its_class() -> None:
    line_of = pydantic_lines(ROUTER, "Router")
    lines = ROUTER.splitlines()
    user_id = line_of("/$defs/FetchUserFeatures/properties/user_id/pattern")
    assert user_id is not None and lines[user_id - 1].strip().startswith("user_id:")
    action = line_of("/properties/action/oneOf")
    assert action is not None and lines[action - 1].strip().startswith("action:")
    respond = line_of("/$defs/Respond/required")
    assert respond is not None and lines[respond - 1].startswith("class Respond(")
    assert line_of("/$defs/NotAClass/type") is None


def test_an_alias_names_the_field_in_the_schema() -> None:
    source = "from pydantic import BaseModel, Field\n\n\nclass A(BaseModel):\n" \
             "    name: str = Field(alias='fullName', max_length=3)\n"  # fmt: skip
    assert pydantic_lines(source, "A")("/properties/fullName/maxLength") == 5
