"""The playground page: opened blank, on an example, or on a permalink (and reopening its
session)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from app.engine import PRESETS, MaskingLibrary, presets
from app.engine.stepper.breakpoints import breakpoint_from
from app.examples import Example, load_all_examples
from app.exceptions import InvalidInput, NotReady, PermalinkNotFound
from app.settings import LOCAL_MODEL_ID
from app.web.errors import not_found_page
from app.web.runtime.deps import StateDep
from app.web.runtime.state import AppState
from app.web.schemas.forms import open_choice, shared_step
from app.web.services import actions, rebuilds
from app.web.services import permalinks as sharing
from app.web.ui.fragments import footer, fragments, inspector_context, render_page

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


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
        "reasoning": request.get("reasoning", "none"),
        "breakpoints": "\n".join(
            breakpoint_from(**b).text for b in request.get("breakpoints") or ()
        ),
        "min_tokens": request.get("min_tokens", 0),
        "stop_token_ids": request.get("stop_token_ids") or [],
        "stop": request.get("stop") or [],
    }


def _prefill_from_example(example: Example | None) -> dict[str, Any]:
    return {
        "kind": example.kind if example else "json_schema",
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


def _page(request: Request, state: AppState, prefill: dict[str, Any], **extra: Any) -> HTMLResponse:
    examples = load_all_examples()
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
        "shared_step": None,
        "recorded": [],
        **extra,
    }
    return render_page(state, request, "pages/playground.html", context)


@router.get("/", response_class=HTMLResponse)
async def playground(request: Request, state: StateDep, example: str | None = None) -> HTMLResponse:
    """The playground, opened on an example (``?example=pricing``; without one, the first
    example, so that a first visit has something to run)."""
    examples = load_all_examples()
    initial = next((e for e in examples if e.id == example), None)
    if example is None and examples:
        initial = examples[0]
    return _page(
        request, state, _prefill_from_example(initial), example_id=initial.id if initial else None
    )


@router.get("/s/{snapshot_id}", response_class=HTMLResponse)
async def permalink_page(
    request: Request,
    state: StateDep,
    snapshot_id: str,
    step: Annotated[int | None, Query(ge=0)] = None,
) -> HTMLResponse:
    """A shared snapshot: the playground pre-filled; its trace replays on load, inspected at
    ``?step=`` (the step shared, outside the snapshot and its id) or at its last step."""
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
        shared_step=step,
        # Painted at once, greyed, until the live session rebuilt behind them replaces them.
        recorded=await sharing.load_recorded(state, snapshot_id),
    )


@router.post("/ui/permalinks/{snapshot_id}/open", response_class=HTMLResponse)
async def open_permalink_fragment(
    request: Request, state: StateDep, snapshot_id: str
) -> HTMLResponse:
    """The shared session reopened: every chip, the step shared inspected (the form's
    ``step``; the last one without it, or past the end), the status, the footer. The form's
    ``model`` opens it on that model instead of its own."""
    form = await request.form()
    choice = open_choice(form)
    wanted = shared_step(form)
    snapshot, _ = await sharing.load(state, snapshot_id)
    total = sum(a.get("n", 1) for a in snapshot["actions"])
    with rebuilds.tracked(state, str(form.get("rebuild") or ""), total):
        handle = await sharing.open_snapshot(
            state, snapshot, model=choice.model, snapshot_id=snapshot_id
        )
    answer = await actions.step_response(state, handle, [])
    steps = handle.session.steps
    parts = [
        ("partials/_session.html", {"handle": handle, "state": answer, "steps": steps}),
        ("partials/_prompt.html", {"prompt": handle.session.prompt, "oob": True}),
        footer(handle),
    ]
    if steps:
        at = len(steps) - 1 if wanted is None else min(wanted, len(steps) - 1)
        context = inspector_context(handle, steps[at], oob=True)
        parts.append(("partials/_inspector.html", context))
    return fragments(state, *parts)


@router.get("/ui/permalinks/{snapshot_id}/progress")
async def permalink_progress(
    state: StateDep, snapshot_id: str, rebuild: Annotated[str, Query(max_length=64)] = ""
) -> JSONResponse:
    """How far the rebuild the page named ``rebuild`` is: ``{"done", "total"}`` steps (its
    final count for a minute after it ends), or ``{"done": null}`` when there is none by that
    name (not started yet, or long over)."""
    found = rebuilds.progress(state, rebuild)
    if found is None:
        return JSONResponse({"done": None, "total": None})
    return JSONResponse({"done": found[0], "total": found[1]})
