"""Replaying a text or token ids through a grammar, without the model: ``POST /api/replay``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.engine.stack_pins import MASKSCOPE
from app.web.routes.encoding import json_response
from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import ReplayIn
from app.web.services import actions, stacks
from app.web.services.replay_cause import with_cause
from app.web.services.walks import request_budget

__all__ = ["router"]

router = APIRouter()


@router.post("/api/replay", tags=["grammar"])
async def replay(body: ReplayIn, state: StateDep) -> Response:
    """Walk a text, token ids (or a pasted vLLM log line's), or both through the grammar,
    without the model (with the tokenizer of the one ``model`` names): at most
    ``MASKSCOPE_REPLAY_MAX_TOKENS`` tokens (413 beyond), bitmasks only for ``bitmask_for``. The
    first refused token is explained in ``refusal``. The walk may use ``MASKSCOPE_WALK_BUDGET_S``
    of CPU (422 ``grammar_too_slow`` beyond, naming how far it got) and stops when the client
    leaves. Under a ``stack`` other than ``maskscope``, each step's mask is the row that
    release's own structured-output manager fills (``mask_by`` names it)."""
    engine = state.engine_for(body.model)
    with request_budget(state, "the replay"):  # one budget for the replay and its re-walks
        if body.stack != MASKSCOPE:
            result = await stacks.replay_on_stack(state, engine, body, body.stack)
        else:
            result = await actions.replay(state, engine, body)
        result = await with_cause(state, engine, body, result)
    return await json_response(result.to_dict())
