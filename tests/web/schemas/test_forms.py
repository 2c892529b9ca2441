"""The page's form read into request bodies: the same bodies, and the same errors, as the API's."""

from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import FormData

from app.exceptions import InvalidInput
from app.web.schemas.forms import (
    STEP_N_MAX,
    compile_request,
    forced_token,
    form_session_request,
    panel_tests_request,
    replay_request,
    step_count,
)


@pytest.mark.parametrize(
    ("fields", "n"), [({}, 1), ({"n": "3"}, 3), ({"n": str(STEP_N_MAX)}, STEP_N_MAX)]
)
def test_step_count_reads_n(fields: dict[str, str], n: int) -> None:
    assert step_count(FormData(fields)) == n


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "n must be an integer"),
        ("0", "n must be between 1 and 512, got 0"),
        ("513", "n must be between 1 and 512, got 513"),
    ],
)
def test_a_bad_step_count_says_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        step_count(FormData({"n": value}))


def test_forced_token_reads_the_token_and_the_step() -> None:
    assert forced_token(FormData({"token_id": "7", "at": ""})) == (7, None)
    assert forced_token(FormData({"token_id": "7", "at": "2"})) == (7, 2)
    with pytest.raises(InvalidInput, match="token_id and at must be integers"):
        forced_token(FormData({"token_id": "seven"}))


def test_the_form_gives_the_session_request_the_api_takes() -> None:
    form = FormData(
        {"kind": "json_schema", "source": '{"type": "integer"}', "user": "a number",
         "system": "", "temperature": "", "max_tokens": "", "compare": "on"}
    )  # fmt: skip
    body = form_session_request(form)
    assert [m.model_dump() for m in body.messages or []] == [
        {"role": "user", "content": "a number"}
    ]
    assert (body.max_tokens, body.sampling.temperature, body.compare) == (256, 0, "llguidance")
    assert body.grammar.options.preset == "maskscope"


def test_a_custom_preset_is_read_on_the_neutral_base() -> None:
    form = FormData({"source": "{}", "preset": "custom", "any_whitespace": "on", "sep_key": ":"})
    body = compile_request(form)
    assert body.options.preset == "maskscope" and body.options.any_whitespace is True
    assert body.options.separators == (", ", ":")


def test_a_bad_field_is_the_api_validation_error() -> None:
    with pytest.raises(RequestValidationError) as caught:
        replay_request(FormData({"source": "{}", "kind": "yaml"}))
    assert caught.value.errors()[0]["loc"][:2] == ("grammar", "kind")


def test_the_tests_panel_keeps_each_tests_recorded_verdicts() -> None:
    tests = '[{"text": "1", "expect": "pass"}]'
    body, recorded = panel_tests_request(FormData({"source": "{}", "tests": tests}))
    assert [t.text for t in body.tests] == ["1"] and recorded == [None]
