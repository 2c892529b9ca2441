"""The configuration page is generated from ``Settings``: every field, its variable, type,
default and description, never a hand-copied table."""

from __future__ import annotations

from types import ModuleType

from app.settings import RemoteEngineSpec, Settings, TokenizerSpec
from tests.docs.conftest import ROOT

PAGE = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_every_field_has_a_description(hooks: ModuleType) -> None:
    for cls in (Settings, RemoteEngineSpec, TokenizerSpec):
        described = hooks.descriptions(cls)
        missing = [name for name in cls.model_fields if not described.get(name)]
        assert missing == [], f"{cls.__name__}: fields without a description"


def test_the_table_has_one_row_per_setting_in_field_order(hooks: ModuleType) -> None:
    table = hooks.render("Settings").splitlines()
    variables = [line.split(" | ")[0].removeprefix("| ") for line in table[2:]]
    assert variables == [f"`MASKSCOPE_{name.upper()}`" for name in Settings.model_fields]


def test_a_row_says_type_bounds_default_and_description(hooks: ModuleType) -> None:
    rows = {row[0]: row for row in hooks.rows(Settings, "MASKSCOPE_")}
    env, kind, default, text = rows["`MASKSCOPE_COMPILE_WORKERS`"]
    assert kind == "int (≥ 1, ≤ 64)" and default == "`2`"
    assert text == hooks.descriptions(Settings)["compile_workers"]
    assert rows["`MASKSCOPE_DTYPE`"][1] == "`auto` \\| `float32` \\| `bfloat16` \\| `float16`"
    assert rows["`MASKSCOPE_DB_URL`"][2] == "unset"


def test_a_description_given_on_the_field_wins_over_the_docstring(hooks: ModuleType) -> None:
    from pydantic import BaseModel, Field

    class Example(BaseModel):
        """An example.

        Attributes:
            size: from the docstring, over
                two lines with ``code``.
            name: from the docstring.
        """

        size: int = 1
        name: str = Field(default="x", description="from the field")

    assert hooks.descriptions(Example) == {
        "size": "from the docstring, over two lines with `code`.",
        "name": "from the field",
    }


def test_the_page_holds_the_markers_and_no_hand_written_table() -> None:
    for name in ("Settings", "RemoteEngineSpec", "TokenizerSpec"):
        assert f"<!-- settings:{name} -->" in PAGE
    assert "| `MASKSCOPE_" not in PAGE
