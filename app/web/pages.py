"""The playground page and the HTMX fragments it swaps in."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from app.caps import MAX_STEP_COUNT
from app.engine import PRESETS, MaskingLibrary, StepRecord, presets
from app.engine.mask_summary import summarize_mask
from app.examples import Example, load_examples
from app.exceptions import GrammarError, InvalidInput, NotReady, PermalinkNotFound
from app.settings import LOCAL_MODEL_ID
from app.web import actions, doctor, sharing
from app.web.deps import HandleDep, StateDep
from app.web.errors import not_found_page
from app.web.models import (
    CompileIn,
    DoctorIn,
    OpenPermalinkIn,
    ReplayIn,
    SchemaTestsIn,
    SessionIn,
    check_test_sizes,
    listed_tests,
)
from app.web.replay_cause import replay_cause
from app.web.sessions import SessionHandle
from app.web.state import AppState

__all__ = ["form_session_request", "router"]

router = APIRouter(include_in_schema=False)

#: The most steps one page request takes (the API's cap on ``n``).
STEP_N_MAX = MAX_STEP_COUNT


def _render(state: AppState, request: Request, name: str, context: dict[str, Any]) -> HTMLResponse:
    response: HTMLResponse = state.templates.TemplateResponse(request, name, context)
    return response


def _fragments(
    state: AppState, *parts: tuple[str, dict[str, Any]], prefix: str = ""
) -> HTMLResponse:
    html = "".join(state.render(name, ctx) for name, ctx in parts)
    return HTMLResponse(prefix + html)


def _validated(model: type[Any], data: dict[str, Any]) -> Any:
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
    }
    if form.get("prompt_mode") == "raw":
        body["raw_prompt"] = form.get("raw_prompt") or ""
    else:
        body["messages"] = [
            {"role": role, "content": text}
            for role in ("system", "user")
            if (text := str(form.get(role) or "")) or role == "user"
        ]
    session: SessionIn = _validated(SessionIn, body)
    return session


def _prefill_from_request(request: dict[str, Any]) -> dict[str, Any]:
    """Form values for a session request (from a snapshot): the page shows what it can."""
    messages = request.get("messages") or []
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    grammar = request["grammar"]
    return {
        "kind": grammar["kind"],
        "source": grammar["source"],
        "options": grammar.get("options") or {},
        "system": system,
        "user": user,
        "raw_prompt": request.get("raw_prompt") or "",
        "prompt_mode": "raw" if request.get("raw_prompt") is not None else "chat",
        "schema_in_prompt": request.get("schema_in_prompt", False),
        "sampling": request.get("sampling") or {},
        "max_tokens": request.get("max_tokens", 256),
        "engine": grammar.get("engine", "xgrammar"),
        "compare": request.get("compare") is not None,
        "model": request.get("model", LOCAL_MODEL_ID),
    }


def _prefill_from_example(example: Example | None) -> dict[str, Any]:
    return {
        "kind": "json_schema",
        "source": example.source() if example else "",
        "options": {},
        "system": example.system if example else "Reply with JSON only.",
        "user": example.prompt if example else "",
        "raw_prompt": "",
        "prompt_mode": "chat",
        "schema_in_prompt": example.schema_in_prompt if example else True,
        "sampling": {},
        "max_tokens": example.max_tokens if example else 256,
    }


def _identity(state: AppState, model_id: str) -> dict[str, str] | None:
    """The identity of the model ``model_id`` names, or None while it is not ready here."""
    try:
        return state.engine_for(model_id).model.identity.to_dict()
    except (InvalidInput, NotReady):
        return None


def _footer(handle: SessionHandle) -> tuple[str, dict[str, Any]]:
    """The footer, out of band: the model the session runs on."""
    context = {"identity": handle.session.model.identity.to_dict(),
               "model_id": handle.request["model"], "oob": True}  # fmt: skip
    return "partials/_footer.html", context


def _page(request: Request, state: AppState, prefill: dict[str, Any], **extra: Any) -> HTMLResponse:
    examples = load_examples()
    models = state.models()
    wanted = prefill.get("model", LOCAL_MODEL_ID)
    # A permalink's model not configured here: the picker falls back to the local model, and
    # the banner offers to open the permalink on the model picked.
    missing = None if any(m["id"] == wanted for m in models) else wanted
    model_id = LOCAL_MODEL_ID if missing else wanted
    options = {**PRESETS["maskscope"].to_dict(), "preset": "maskscope", **prefill["options"]}
    filled = {"engine": "xgrammar", "compare": False, **prefill, "options": options}
    context = {
        "examples": examples,
        "prefill": {**filled, "model": model_id},
        "models": models,
        "llguidance_presets": {
            name: o.to_dict() for name, o in presets(MaskingLibrary.LLGUIDANCE).items()
        },
        "identity": _identity(state, model_id),
        "model_id": model_id,
        "presets": {name: o.to_dict() for name, o in PRESETS.items()},
        "caps": {"max_tokens": state.settings.max_tokens_cap},
        "example_id": None,
        "permalink": None,
        "differences": [],
        "model_missing": missing,
        "shared_tests": [],
        **extra,
    }
    return _render(state, request, "pages/playground.html", context)


@router.get("/", response_class=HTMLResponse)
async def playground(request: Request, state: StateDep, example: str | None = None) -> HTMLResponse:
    """The playground, optionally opened on an example (``?example=pricing``)."""
    initial = next((e for e in load_examples() if e.id == example), None)
    return _page(request, state, _prefill_from_example(initial), example_id=example)


@router.get("/s/{snapshot_id}", response_class=HTMLResponse)
async def permalink_page(request: Request, state: StateDep, snapshot_id: str) -> HTMLResponse:
    """A shared snapshot: the playground pre-filled; its trace replays on load."""
    try:
        snapshot, _ = await sharing.load(state, snapshot_id)
    except PermalinkNotFound:
        return not_found_page(
            request, "This permalink does not exist: check the link, or ask for a new one."
        )
    return _page(
        request,
        state,
        _prefill_from_request(snapshot["request"]),
        permalink=snapshot_id,
        trace_steps=sum(a.get("n", 1) for a in snapshot["actions"]),
        # While the model loads, the page shows; opening the session is 503.
        differences=sharing.differences(state, snapshot),
        shared_tests=snapshot.get("tests") or [],
    )


@router.post("/ui/permalinks/{snapshot_id}/open", response_class=HTMLResponse)
async def open_permalink_fragment(
    request: Request, state: StateDep, snapshot_id: str
) -> HTMLResponse:
    """The shared session reopened: every chip, the last step inspected, the status, the
    footer. The form's ``model`` opens it on that model instead of its own."""
    choice: OpenPermalinkIn = _validated(
        OpenPermalinkIn, {"model": (await request.form()).get("model") or None}
    )
    snapshot, _ = await sharing.load(state, snapshot_id)
    handle = await sharing.open_snapshot(state, snapshot, model=choice.model)
    answer = await actions.step_response(state, handle, [])
    steps = handle.session.steps
    parts = [
        ("partials/_session.html", {"handle": handle, "state": answer, "steps": steps}),
        ("partials/_prompt.html", {"prompt": handle.session.prompt, "oob": True}),
        _footer(handle),
    ]
    if steps:
        context = _inspector_context(handle, steps[-1], oob=True)
        parts.append(("partials/_inspector.html", context))
    return _fragments(state, *parts)


@router.post("/ui/sessions/{session_id}/share", response_class=HTMLResponse)
async def share_fragment(request: Request, state: StateDep, handle: HandleDep) -> HTMLResponse:
    """Store the session as a permalink, with the Tests panel's tests (the form's ``tests``,
    a JSON list) and their verdicts; the link, ready to copy."""
    listed, _ = listed_tests(str((await request.form()).get("tests") or ""))
    body: SchemaTestsIn = _validated(
        SchemaTestsIn, {"grammar": handle.request["grammar"], "tests": listed}
    )
    check_test_sizes(body.tests)
    engine = state.engine_for(handle.request["model"])
    tests = await sharing.recorded_tests(state, engine, body.grammar, body.tests)

    def store() -> tuple[str, bool]:
        return state.store.put(sharing.snapshot_of_session(handle, tests=tests))

    snapshot_id, _ = await asyncio.to_thread(store)
    context = {"url": f"{request.base_url}s/{snapshot_id}", "path": f"/s/{snapshot_id}",
               "session_id": handle.id}  # fmt: skip
    return _render(state, request, "partials/_share.html", context)


@router.post("/ui/compile", response_class=HTMLResponse)
async def compile_fragment(request: Request, state: StateDep) -> HTMLResponse:
    """The compile panel for the form's grammar, with the picked model's tokenizer; errors
    render in the panel, with a 200."""
    form = await request.form()
    grammar: CompileIn = _validated(CompileIn, {**_grammar(form), "model": _model(form)})
    engine = state.engine_for(grammar.model)
    context: dict[str, Any] = {"options": grammar.options.echo()}
    try:
        result, resolved = await actions.compile_grammar(state, engine, grammar)
        context["result"] = result
        context["derived"] = resolved.pydantic
    except (GrammarError, InvalidInput) as error:
        context["error"] = error.to_dict()
    return _render(state, request, "partials/_compile.html", context)


@router.post("/ui/doctor", response_class=HTMLResponse)
async def doctor_fragment(request: Request, state: StateDep) -> Response:
    """The Doctor tab for the form's grammar and model; errors render in the tab, with a 200."""
    form = await request.form()
    body: DoctorIn = _validated(DoctorIn, {"grammar": _grammar(form), "model": _model(form),
                                           "max_tokens": _number(form, "max_tokens")})  # fmt: skip
    engine = state.engine_for(body.model)
    if await request.is_disconnected():  # a newer compile replaced this request
        return Response(status_code=204)
    context: dict[str, Any] = {"max_tokens": body.max_tokens}
    try:
        report = await doctor.examine(state, engine, body)
        marks = doctor.editor_marks(report)
        counts = report.counts()
        flagged = counts["ignored"] + counts["weakened"] + len(report.witnesses)
        context.update(report=report, marks=marks, flagged=flagged)
    except (GrammarError, InvalidInput) as error:
        context["error"] = error.to_dict()
    return _render(state, request, "partials/_doctor.html", context)


def _inspector_context(
    handle: SessionHandle, step: StepRecord, *, oob: bool = False
) -> dict[str, Any]:
    """The inspector's context for a step of ``handle``: the record and its mask in words (with
    the session's own tokenizer)."""
    summary = summarize_mask(step.bitmask, handle.session.model.tokens)
    return {"step": step, "session_id": handle.id, "summary": summary, "oob": oob,
            "model_id": handle.request["model"]}  # fmt: skip


async def _step_parts(
    state: AppState, handle: SessionHandle, records: list[StepRecord]
) -> list[tuple[str, dict[str, Any]]]:
    """Chips for new steps, then the inspector (last step) and status out of band."""
    parts: list[tuple[str, dict[str, Any]]] = [
        ("partials/_chip.html", {"step": r, "with_bitmask": False}) for r in records
    ]
    steps = handle.session.steps
    if steps:
        context = _inspector_context(handle, steps[-1], oob=True)
        parts.append(("partials/_inspector.html", context))
    answer = await actions.step_response(state, handle, [])
    parts.append(("partials/_status.html", {"state": answer, "handle": handle, "oob": True}))
    return parts


@router.post("/ui/sessions", response_class=HTMLResponse)
async def new_session(request: Request, state: StateDep) -> HTMLResponse:
    """Open a session from the form, on the picked model: its output area, and the rendered
    prompt and the footer out of band."""
    form = await request.form()
    handle = await actions.create_session(state, form_session_request(form))
    answer = await actions.step_response(state, handle, [])
    parts = [
        ("partials/_session.html", {"handle": handle, "state": answer}),
        ("partials/_prompt.html", {"prompt": handle.session.prompt, "oob": True}),
        _footer(handle),
    ]
    return _fragments(state, *parts)


@router.post("/ui/sessions/{session_id}/step", response_class=HTMLResponse)
async def step_fragment(request: Request, state: StateDep, handle: HandleDep) -> HTMLResponse:
    """``n`` steps (1 by default): their chips, with the inspector and status out of band."""
    form = await request.form()
    try:
        n = int(str(form.get("n") or 1))
    except ValueError:
        raise InvalidInput("n must be an integer") from None
    if not 1 <= n <= STEP_N_MAX:
        raise InvalidInput(f"n must be between 1 and {STEP_N_MAX}, got {n}")
    records = await actions.step(state, handle, n)
    return _fragments(state, *await _step_parts(state, handle, records))


def _deletions(first: int, last: int) -> str:
    return "".join(f'<span id="tok-{i}" hx-swap-oob="delete"></span>' for i in range(first, last))


@router.post("/ui/sessions/{session_id}/back", response_class=HTMLResponse)
async def back_fragment(state: StateDep, handle: HandleDep) -> HTMLResponse:
    """One step back: the last chip is removed."""
    before = len(handle.session.steps)
    await actions.back(state, handle, 1)
    removed = _deletions(len(handle.session.steps), before)
    return _fragments(state, *await _step_parts(state, handle, []), prefix=removed)


@router.post("/ui/sessions/{session_id}/force", response_class=HTMLResponse)
async def force_fragment(request: Request, state: StateDep, handle: HandleDep) -> HTMLResponse:
    """Force a token at a step (going back to it first); 409 with the reason when blocked."""
    form = await request.form()
    try:
        token_id = int(str(form.get("token_id")))
        at = int(str(form.get("at"))) if form.get("at") not in (None, "") else None
    except ValueError:
        raise InvalidInput("token_id and at must be integers") from None
    before = len(handle.session.steps)
    record = await actions.force(state, handle, token_id, at)
    removed = _deletions(record.index, before)
    return _fragments(state, *await _step_parts(state, handle, [record]), prefix=removed)


@router.post("/ui/sessions/{session_id}/run", response_class=HTMLResponse)
async def run_fragment(state: StateDep, handle: HandleDep) -> HTMLResponse:
    """The element that opens the run stream (the SSE extension connects it)."""
    after = len(handle.session.steps) - 1
    html = (
        f'<div id="runner" sse-connect="/api/sessions/{handle.id}/events?after={after}" '
        'sse-close="end" data-running="true">'
        '<div sse-swap="step" hx-target="#tokens" hx-swap="beforeend"></div>'
        '<div sse-swap="done,paused" hx-target="#status" hx-swap="outerHTML"></div></div>'
    )
    return HTMLResponse(html)


@router.post("/ui/sessions/{session_id}/pause")
async def pause_fragment(handle: HandleDep) -> Response:
    """Ask the run to stop after the step in flight."""
    handle.pause = handle.streaming
    return Response(status_code=204)


@router.get("/ui/sessions/{session_id}/steps/{index}", response_class=HTMLResponse)
async def inspector_fragment(
    request: Request, state: StateDep, handle: HandleDep, index: Annotated[int, Path(ge=0)]
) -> HTMLResponse:
    """The inspector for one step."""
    steps = handle.session.steps
    if index >= len(steps):
        raise InvalidInput(f"step {index} does not exist (the session has {len(steps)} steps)")
    context = _inspector_context(handle, steps[index])
    return _render(state, request, "partials/_inspector.html", context)


async def _replay_form(request: Request) -> ReplayIn:
    form = await request.form()
    body: ReplayIn = _validated(
        ReplayIn,
        {
            "grammar": _grammar(form),
            "model": _model(form),
            "text": form.get("text") or "",
            "compare": _compare(form),
        },
    )
    return body


@router.post("/ui/replay", response_class=HTMLResponse)
async def replay_fragment(request: Request, state: StateDep) -> HTMLResponse:
    """Replay the text against the form's grammar, with the picked model's tokenizer (no
    bitmasks: a click fetches one)."""
    body = await _replay_form(request)
    engine = state.engine_for(body.model)
    result = await actions.replay(state, engine, body)
    cause, accepted_by = await replay_cause(state, engine, body, result)
    context = {"result": result, "text": body.text, "cause": cause, "accepted_by": accepted_by}
    return _render(state, request, "partials/_replay.html", context)


@router.post("/ui/replay/{index}", response_class=HTMLResponse)
async def replay_inspector(
    request: Request, state: StateDep, index: Annotated[int, Path(ge=0)]
) -> HTMLResponse:
    """The inspector for one replayed token, with its bitmask: the walk goes up to it only."""
    body = await _replay_form(request)
    engine = state.engine_for(body.model)
    token = await actions.replay_token(state, engine, body.grammar, body.text or "", index)
    context = {"token": token, "index": index, "vocab_size": engine.model.tokens.vocab_size,
               "model_id": body.model,
               "summary": summarize_mask(token.bitmask, engine.model.tokens) if token.bitmask
               else None}  # fmt: skip
    return _render(state, request, "partials/_inspector.html", context)
