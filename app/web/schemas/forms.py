"""The page's form read into the same request bodies the JSON API takes, validated the same way
(a bad field is the same 422, with the same pointer)."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData

from app.caps import MAX_STEP_COUNT
from app.engine.stepper.breakpoints import parse_breakpoint
from app.exceptions import InvalidInput
from app.jsontext import loads
from app.settings import LOCAL_MODEL_ID
from app.web.schemas.bodies import (
    CompileIn,
    DoctorIn,
    OpenPermalinkIn,
    ReplayIn,
    SchemaTestsIn,
    SessionIn,
    check_test_sizes,
)

__all__ = [
    "STEP_N_MAX",
    "compile_request",
    "doctor_request",
    "form_breakpoints",
    "form_session_request",
    "forced_token",
    "open_choice",
    "replay_request",
    "share_tests",
    "shared_step",
    "step_count",
    "token_ids",
    "panel_tests_request",
    "validated",
]

#: The most steps one page request takes (the API's cap on ``n``).
STEP_N_MAX = MAX_STEP_COUNT

Body = TypeVar("Body", bound=BaseModel)


def listed_tests(raw: str) -> tuple[list[Any], list[Any]]:
    """The page's tests (a JSON list of ``{"text", "expect", "recorded"?}``) and, apart, the
    verdicts recorded at share time for the tests that came from a permalink."""
    try:
        listed = loads(raw or "[]")
    except json.JSONDecodeError as error:
        raise InvalidInput(f"tests: not JSON ({error.msg})", pointer="/tests") from None
    except RecursionError:
        raise InvalidInput("tests: nested too deeply to parse", pointer="/tests") from None
    if not isinstance(listed, list):
        raise InvalidInput("tests: a list of tests", pointer="/tests")
    recorded = [t.pop("recorded", None) if isinstance(t, dict) else None for t in listed]
    return listed, recorded


def validated(model: type[Body], data: dict[str, Any]) -> Body:
    """``data`` as a ``model``, or the 422 the API gives for the same body."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None


def _number(form: FormData, name: str) -> str | None:
    value = str(form.get(name) or "").strip()
    return value or None


def _grammar(form: FormData) -> dict[str, Any]:
    # "custom" (an option edited by hand): every option the presets differ in is explicit in the
    # form, so any preset is a neutral base.
    preset = form.get("preset") or "maskscope"
    options: dict[str, Any] = {
        "preset": "maskscope" if preset == "custom" else preset,
        "any_whitespace": form.get("any_whitespace") == "on",
        "strict_mode": form.get("strict_mode") == "on",
        "indent": _number(form, "indent"),
        "max_whitespace_cnt": _number(form, "max_whitespace_cnt"),
        "root_model": _number(form, "root_model"),
    }
    item, key = str(form.get("sep_item") or ""), str(form.get("sep_key") or "")
    if item or key:
        options["separators"] = [item or ", ", key or ": "]
    return {"kind": form.get("kind") or "json_schema", "source": form.get("source") or "",
            "options": options, "engine": form.get("engine") or "xgrammar"}  # fmt: skip


def _model(form: FormData) -> str:
    """The model picker's choice: ``local`` or a remote engine's id."""
    return str(form.get("model") or LOCAL_MODEL_ID)


def _compare(form: FormData) -> str | None:
    """Compare mode: the other engine when the form's toggle is on."""
    if form.get("compare") != "on":
        return None
    return "xgrammar" if form.get("engine") == "llguidance" else "llguidance"


def form_breakpoints(text: str) -> list[dict[str, Any]]:
    """The setup's breakpoints, one a line (``path=$.items[3]*``, ``top1_blocked,k=3``), in
    the request's form; a line that makes no sense is a 422 naming it."""
    out = []
    for number, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            out.append(parse_breakpoint(line).to_dict())
        except InvalidInput as error:
            raise InvalidInput(
                f"breakpoints, line {number + 1}: {error.message}", pointer="/breakpoints"
            ) from None
    return out


def form_end_rules(form: FormData) -> dict[str, Any]:
    """The end of generation the options bar sets: ``min_tokens``, ``stop_token_ids`` (ids
    separated by commas or spaces) and ``stop`` (one string a line)."""
    try:
        ids = token_ids(str(form.get("stop_token_ids") or "")) or []
    except InvalidInput as error:
        raise InvalidInput(
            f"stop_token_ids: {error.message}",
            pointer=(error.pointer or "").replace("/token_ids", "/stop_token_ids", 1),
        ) from None
    stop = [line for line in str(form.get("stop") or "").splitlines() if line]
    return {"min_tokens": _number(form, "min_tokens") or 0, "stop_token_ids": ids, "stop": stop}


def form_session_request(form: FormData) -> SessionIn:
    """The session request the playground's form describes."""
    body: dict[str, Any] = {
        "grammar": _grammar(form),
        "sampling": {
            "temperature": _number(form, "temperature") or 0,
            "top_p": _number(form, "top_p") or 1,
            "seed": _number(form, "seed"),
        },
        "max_tokens": _number(form, "max_tokens") or 256,
        "schema_in_prompt": form.get("schema_in_prompt") == "on",
        "compare": _compare(form),
        "model": _model(form),
        "reasoning": form.get("reasoning") or "none",
        "breakpoints": form_breakpoints(str(form.get("breakpoints") or "")),
        **form_end_rules(form),
    }
    if form.get("prompt_mode") == "raw":
        body["raw_prompt"] = form.get("raw_prompt") or ""
    else:
        body["messages"] = [
            {"role": role, "content": text}
            for role in ("system", "user")
            if (text := str(form.get(role) or "")) or role == "user"
        ]
    return validated(SessionIn, body)


def compile_request(form: FormData) -> CompileIn:
    """The compile request for the form's grammar and model."""
    return validated(CompileIn, {**_grammar(form), "model": _model(form)})


def doctor_request(form: FormData) -> DoctorIn:
    """The Doctor request for the form's grammar, model and token budget."""
    return validated(DoctorIn, {"grammar": _grammar(form), "model": _model(form),
                                "max_tokens": _number(form, "max_tokens")})  # fmt: skip


def token_ids(value: str) -> list[int] | None:
    """The ids box: integers separated by commas or spaces, brackets allowed (a pasted list);
    None when empty.

    Raises:
        InvalidInput: an item is not an integer (its position is named).
    """
    items = [item for item in re.split(r"[\s,]+", value.strip().strip("[]")) if item]
    for position, item in enumerate(items):
        if not re.fullmatch(r"-?\d+", item):
            raise InvalidInput(
                f"token ids are integers separated by commas or spaces; item {position} is "
                f"{item[:20]!r}",
                pointer=f"/token_ids/{position}",
            )
    return [int(item) for item in items] or None


def replay_request(form: FormData) -> ReplayIn:
    """The replay request for the form's grammar, model, text, ids, log line and compare
    toggle (the text first, then the ids, then the log line's ids)."""
    log = str(form.get("log") or "").strip()
    return validated(
        ReplayIn,
        {
            "grammar": _grammar(form),
            "model": _model(form),
            "text": form.get("text") or "",
            "token_ids": token_ids(str(form.get("token_ids") or "")),
            "log": log or None,
            "compare": _compare(form),
            "reasoning": form.get("reasoning") or "none",
        },
    )


def panel_tests_request(form: FormData) -> tuple[SchemaTestsIn, list[Any]]:
    """The Tests panel's request (the form's grammar and model, its ``tests`` as a JSON list),
    and the verdicts recorded with each test (None where none was)."""
    listed, recorded = listed_tests(str(form.get("tests") or ""))
    body = validated(
        SchemaTestsIn, {"grammar": _grammar(form), "model": _model(form), "tests": listed}
    )
    check_test_sizes(body.tests)
    return body, recorded


def share_tests(form: FormData, grammar: dict[str, Any]) -> SchemaTestsIn:
    """The Tests panel's tests (the form's ``tests``) to share with a session of ``grammar``."""
    listed, _ = listed_tests(str(form.get("tests") or ""))
    return validated(SchemaTestsIn, {"grammar": grammar, "tests": listed})


def open_choice(form: FormData) -> OpenPermalinkIn:
    """The model to reopen a permalink on (its own when the form names none)."""
    return validated(OpenPermalinkIn, {"model": form.get("model") or None})


def shared_step(form: FormData) -> int | None:
    """The form's ``step``: the step of a reopened permalink to inspect (None: the last)."""
    raw = str(form.get("step") or "")
    if not raw:
        return None
    try:
        step = int(raw)
    except ValueError:
        raise InvalidInput(f"step must be a whole number, got {raw[:20]!r}") from None
    if step < 0:
        raise InvalidInput(f"step must be 0 or more, got {step}")
    return step


def step_count(form: FormData) -> int:
    """The form's ``n``: how many steps to take (1 by default)."""
    try:
        n = int(str(form.get("n") or 1))
    except ValueError:
        raise InvalidInput("n must be an integer") from None
    if not 1 <= n <= STEP_N_MAX:
        raise InvalidInput(f"n must be between 1 and {STEP_N_MAX}, got {n}")
    return n


def forced_token(form: FormData) -> tuple[int, int | None]:
    """The token to force (``token_id``) and the step to force it at (``at``; the next one when
    absent)."""
    try:
        token_id = int(str(form.get("token_id")))
        at = int(str(form.get("at"))) if form.get("at") not in (None, "") else None
    except ValueError:
        raise InvalidInput("token_id and at must be integers") from None
    return token_id, at
