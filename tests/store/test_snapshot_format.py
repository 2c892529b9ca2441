"""The snapshot format's rule: fields added since version 1 are left out at their default."""

from __future__ import annotations

from typing import Any

from app.store.snapshot_format import V1_FIELDS, without_defaults


def test_a_field_at_its_default_is_left_out_unless_version_1_wrote_it() -> None:
    content: dict[str, Any] = {
        "version": 1,
        "request": {"top_k": 10, "new_option": False, "grammar": {"kind": "regex"}},
        "actions": [{"op": "step", "n": 1, "new_flag": None}],
        "tests": [],
    }
    defaults: dict[str, Any] = {"request.top_k": 10, "request.new_option": False,
                "actions[].new_flag": None, "actions[].n": 1, "tests": []}  # fmt: skip
    assert without_defaults(content, defaults) == {
        "version": 1,
        "request": {"top_k": 10, "grammar": {"kind": "regex"}},
        "actions": [{"op": "step", "n": 1}],
    }


def test_a_field_away_from_its_default_is_kept() -> None:
    content = {"request": {"new_option": True}, "tests": [{"text": "a", "expect": "pass"}]}
    defaults: dict[str, Any] = {"request.new_option": False, "tests": []}
    assert without_defaults(content, defaults) == content


def test_version_1_lists_its_own_fields() -> None:
    assert "request.grammar.options.indent" in V1_FIELDS and "tests" not in V1_FIELDS
