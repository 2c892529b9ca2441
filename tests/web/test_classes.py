"""The allowed-token classes a replay records, against a count of our own over ``/api/vocab``.

#58067 measured, after ``{"location":``, how many allowed tokens start with whitespace and
whether a bare ``"`` is allowed; the replay's ``classes`` must say the same as a count made here
from the vocabulary's texts and the kept bitmask, for each whitespace option.
"""

from __future__ import annotations

import base64
import json
import re
from html import unescape as html_unescape
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.engine.mask_summary import CLASS_KEYS, CLASS_LABELS, DIGITS, WHITESPACE, run_of
from tests.web.conftest import session_body

SCHEMA = json.dumps(
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
)
ASCII_SPACE = " \t\n\r\x0b\x0c"


def _allowed(bitmask: str, size: int) -> np.ndarray:
    words = np.frombuffer(base64.b64decode(bitmask), dtype="<i4")
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:size].astype(bool)


def _made_of(text: str, characters: str) -> bool:
    return text != "" and set(text) <= set(characters)


def _independent(texts: list[str], allowed: np.ndarray) -> dict[str, int]:
    chosen = [texts[i] for i in np.flatnonzero(allowed)]
    return {
        "whitespace_leading": sum(t != "" and t[0] in ASCII_SPACE for t in chosen),
        "digit": sum(_made_of(t, "0123456789") for t in chosen),
        "quote": sum(t == '"' for t in chosen),
        "whitespace": sum(_made_of(t, ASCII_SPACE) for t in chosen),
    }


@pytest.mark.parametrize(
    ("options", "bare_quote", "leading_space"),
    [
        ({"any_whitespace": True}, True, True),
        # xgrammar's separator is then ": ": only `"` after a space, never a bare one
        ({"any_whitespace": False}, False, True),
        ({"any_whitespace": False, "separators": [",", ":"]}, True, False),
    ],
    ids=["any_whitespace", "no_whitespace", "compact_separators"],
)
def test_the_classes_after_location_are_the_vocabularys_own_count(
    client: TestClient, options: dict[str, Any], bare_quote: bool, leading_space: bool
) -> None:
    vocab = client.get("/api/vocab").json()
    grammar = {"kind": "json_schema", "source": SCHEMA, "options": options}
    first = client.post("/api/replay", json={"grammar": grammar, "text": '{"location":'}).json()
    assert first["accepted"] is True
    ids = [t["token_id"] for t in first["tokens"]]
    quote = vocab["tokens"].index('"')
    body = {"grammar": grammar, "token_ids": [*ids, quote], "bitmask_for": [len(ids)]}
    last = client.post("/api/replay", json=body).json()["tokens"][len(ids)]
    allowed = _allowed(last["bitmask"], vocab["vocab_size"])
    assert last["allowed_count"] == int(allowed.sum())
    expected = _independent(vocab["tokens"], allowed)
    assert {label: last["classes"][label] for label in expected} == expected
    # the facts #58067 turned on: whether a bare `"` may follow, and whether whitespace may
    assert last["classes"]["quote"] == int(bare_quote)
    assert (last["classes"]["whitespace_leading"] > 0) is leading_space


def test_a_run_of_whitespace_only_steps_is_read_from_the_records_alone() -> None:
    def record(allowed: int, whitespace: int, digits: int = 0) -> dict[str, Any]:
        return {"allowed_count": allowed, "classes": {WHITESPACE: whitespace, DIGITS: digits}}

    records = [record(5, 5), record(3, 3), record(4, 1), record(2, 2), {"allowed_count": 9}]
    assert run_of(records, WHITESPACE) == [1, 2, 0, 1, 0]
    assert run_of([record(3, 0, 3), record(3, 0, 3)], DIGITS) == [1, 2]
    assert run_of([record(0, 0)], WHITESPACE) == [0]  # an empty mask is no run


def test_each_chip_carries_every_class_of_its_step_for_the_timeline_strip(
    client: TestClient,
) -> None:
    sid = client.post("/api/sessions", json=session_body()).json()["id"]
    html = client.post(f"/ui/sessions/{sid}/step", headers={"HX-Request": "true"}).text
    record = client.get(f"/api/sessions/{sid}").json()["steps"][0]
    chip = re.search(r'<span class="chip[^>]*id="tok-0"[^>]*>', html)
    assert chip is not None
    counts = re.search(r'data-classes="([\d/]+)"', chip.group(0))
    assert counts is not None
    classes = record["classes"]
    assert len(classes) == len(CLASS_KEYS) == 11  # every class the records count
    assert counts.group(1).split("/") == [str(classes[key]) for key in CLASS_KEYS]
    assert sum(classes.values()) > 0 or record["allowed_count"] == 0
    page = client.get("/").text
    assert "/static/playground/classes.js" in page  # the script that draws the strip
    legend = re.findall(r'<span data-class="(\w+)" title="allowed tokens ([^"]*)">', page)
    # the strip's legend: one entry a row, in the chips' order, in the inspector's words
    assert [key for key, _ in legend] == list(CLASS_KEYS)
    assert [html_unescape(words) for _, words in legend] == [CLASS_LABELS[k] for k in CLASS_KEYS]
