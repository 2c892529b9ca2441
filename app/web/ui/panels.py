"""The page's grammar panels: Compile, Doctor, Replay (and a replayed token's inspector)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, Response

from app.engine.mask_summary import summarize_mask
from app.exceptions import GrammarError, InvalidInput
from app.web.runtime.deps import StateDep
from app.web.schemas.forms import compile_request, doctor_request, replay_request
from app.web.services import actions
from app.web.services.examine import editor_marks, examine
from app.web.services.replay_cause import (
    cause_words,
    replay_cause,
    replay_setting,
    schema_check,
    walked_text,
)
from app.web.services.tools_prompt import tools_prompt
from app.web.ui.fragments import render_page

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.post("/ui/compile", response_class=HTMLResponse)
async def compile_fragment(request: Request, state: StateDep) -> HTMLResponse:
    """The compile panel for the form's grammar, with the picked model's tokenizer (a tools
    source's prompt rendered for the form's chat messages); errors render in the panel, with a
    200."""
    form = await request.form()
    grammar = compile_request(form)
    engine = state.engine_for(grammar.model)
    context: dict[str, Any] = {"options": grammar.options.echo()}
    try:
        result, resolved = await actions.compile_grammar(state, engine, grammar)
        context["result"] = result
        context["derived"] = resolved.pydantic
        messages = [{"role": role, "content": text} for role in ("system", "user")
                    if (text := str(form.get(role) or ""))]  # fmt: skip
        context["prompt"] = await tools_prompt(state, engine, resolved.spec, messages)
    except (GrammarError, InvalidInput) as error:
        context["error"] = error.to_dict()
    return render_page(state, request, "partials/_compile.html", context)


@router.post("/ui/doctor", response_class=HTMLResponse)
async def doctor_fragment(request: Request, state: StateDep) -> Response:
    """The Doctor tab for the form's grammar and model; errors render in the tab, with a 200."""
    body = doctor_request(await request.form())
    engine = state.engine_for(body.model)
    if await request.is_disconnected():  # a newer compile replaced this request
        return Response(status_code=204)
    context: dict[str, Any] = {"max_tokens": body.max_tokens}
    try:
        report = await examine(state, engine, body, disconnected=request.is_disconnected)
        marks = editor_marks(report)
        flagged = len(report.findings)  # causes, not documents: stable with the budget
        context.update(report=report, marks=marks, flagged=flagged)
    except (GrammarError, InvalidInput) as error:
        context["error"] = error.to_dict()
    return render_page(state, request, "partials/_doctor.html", context)


@router.post("/ui/replay", response_class=HTMLResponse)
async def replay_fragment(request: Request, state: StateDep) -> HTMLResponse:
    """Replay the text against the form's grammar, with the picked model's tokenizer (no
    bitmasks: a click fetches one)."""
    form = await request.form()
    body = replay_request(form)
    from_log = bool(str(form.get("log") or "").strip())  # the body holds its ids by now
    engine = state.engine_for(body.model)
    result = await actions.replay(state, engine, body)
    cause, accepted_by = await replay_cause(state, engine, body, result)
    text = walked_text(engine, result) if body.token_ids else body.text or ""
    checked = await schema_check(state, engine, body, result)
    setting = await replay_setting(state, engine, body, result, accepted_by, from_log=from_log)
    words = cause_words(result, cause, from_log=from_log)
    context = {"result": result, "text": text, "cause": cause, "accepted_by": accepted_by,
               "schema_check": checked, "cause_words": words, "setting": setting}  # fmt: skip
    return render_page(state, request, "partials/_replay.html", context)


@router.post("/ui/replay/{index}", response_class=HTMLResponse)
async def replay_inspector(
    request: Request, state: StateDep, index: Annotated[int, Path(ge=0)]
) -> HTMLResponse:
    """The inspector for one replayed token, with its bitmask: the walk goes up to it only."""
    body = replay_request(await request.form())
    engine = state.engine_for(body.model)
    token = await actions.replay_token(
        state, engine, body.grammar, body.text or "", index, body.token_ids or ()
    )
    context = {"token": token, "index": index, "vocab_size": engine.model.tokens.vocab_size,
               "model_id": body.model,
               "summary": summarize_mask(token.bitmask, engine.model.tokens) if token.bitmask
               else None}  # fmt: skip
    return render_page(state, request, "partials/_inspector.html", context)
