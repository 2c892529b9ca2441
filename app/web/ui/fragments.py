"""What the page's routes share: templates rendered to a response, and the parts a step shows
(its chip, the inspector and the status out of band, the footer)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from app.engine import StepRecord
from app.engine.mask_summary import summarize_mask
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState
from app.web.services import actions

__all__ = [
    "Part",
    "deletions",
    "footer",
    "fragments",
    "inspector_context",
    "render_page",
    "step_parts",
]

#: A template and its context.
Part = tuple[str, dict[str, Any]]


def render_page(
    state: AppState, request: Request, name: str, context: dict[str, Any]
) -> HTMLResponse:
    """The template ``name`` rendered as a response to ``request``."""
    response: HTMLResponse = state.templates.TemplateResponse(request, name, context)
    return response


def fragments(state: AppState, *parts: Part, prefix: str = "") -> HTMLResponse:
    """Several templates rendered one after the other, after ``prefix``."""
    html = "".join(state.render(name, ctx) for name, ctx in parts)
    return HTMLResponse(prefix + html)


def deletions(state: AppState, first: int, last: int) -> str:
    """Out-of-band deletions of the chips of steps ``first`` to ``last`` (excluded)."""
    return state.render("partials/_deletions.html", {"first": first, "last": last})


def footer(handle: SessionHandle) -> Part:
    """The footer, out of band: the model the session runs on."""
    context = {"identity": handle.session.model.identity.to_dict(),
               "model_id": handle.request["model"], "oob": True}  # fmt: skip
    return "partials/_footer.html", context


def inspector_context(
    handle: SessionHandle, step: StepRecord, *, oob: bool = False
) -> dict[str, Any]:
    """The inspector's context for a step of ``handle``: the record and its mask in words (with
    the session's own tokenizer)."""
    summary = summarize_mask(step.bitmask, handle.session.model.tokens)
    return {"step": step, "session_id": handle.id, "summary": summary, "oob": oob,
            "model_id": handle.request["model"]}  # fmt: skip


async def step_parts(
    state: AppState, handle: SessionHandle, records: list[StepRecord]
) -> list[Part]:
    """Chips for new steps, then the inspector (last step) and status out of band."""
    parts: list[Part] = [
        ("partials/_chip.html", {"step": r, "with_bitmask": False}) for r in records
    ]
    steps = handle.session.steps
    if steps:
        context = inspector_context(handle, steps[-1], oob=True)
        parts.append(("partials/_inspector.html", context))
    answer = await actions.step_response(state, handle, [])
    parts.append(("partials/_status.html", {"state": answer, "handle": handle, "oob": True}))
    return parts
