"""Permalinks: snapshots of a session's request and trace, and sessions reopened from them."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from app.engine import ModelIdentity, Session
from app.exceptions import (
    InvalidInput,
    ModelNotConfigured,
    NotReady,
    PermalinkNotFound,
    TokenRefused,
)
from app.settings import LOCAL_MODEL_ID
from app.store.permalinks import ID_PATTERN
from app.store.trace import canonical_actions, compress
from app.web import actions
from app.web.models import OptionsIn, PermalinkIn, SessionIn
from app.web.sessions import SessionHandle
from app.web.state import AppState

__all__ = ["differences", "load", "open_snapshot", "snapshot_of_request", "snapshot_of_session"]

_VERSION = 1


def _snapshot(
    request: dict[str, Any], trace: list[dict[str, Any]], identity: ModelIdentity
) -> dict[str, Any]:
    grammar = request["grammar"]
    options = OptionsIn.model_validate(grammar.get("options") or {}).echo()
    request = {**request, "grammar": {**grammar, "options": options}}
    request["sampling"] = dict(request["sampling"])
    if request["sampling"]["temperature"] == 0:
        request["sampling"]["seed"] = None  # greedy: the seed plays no part
    if request.get("model") == LOCAL_MODEL_ID:
        del request["model"]  # the default: left out, so that older snapshots keep their ids
    versions = {
        "xgrammar": identity.xgrammar,
        "transformers": identity.transformers,
        "torch": identity.torch,
    }
    # The local model: its id and weight hash; a remote engine: its id, served name, tokenizer
    # hash and vLLM version.
    model = {k: v for k, v in identity.to_dict().items() if k not in versions}
    return {
        "version": _VERSION,
        "request": request,
        "actions": trace,
        "model": model,
        "versions": versions,
    }


def snapshot_of_request(body: PermalinkIn, identity: ModelIdentity) -> dict[str, Any]:
    """The canonical snapshot of a permalink request (defaults filled, trace canonical, built
    in time linear in the actions: run it off the event loop all the same).

    Raises:
        InvalidInput: sampling without a seed, which could not be reproduced.
    """
    if body.sampling.temperature > 0 and body.sampling.seed is None:
        raise InvalidInput(
            "a sampled trace needs its seed to be reproduced", pointer="/sampling/seed"
        )
    request = SessionIn.model_validate(body.model_dump(exclude={"actions"})).model_dump(mode="json")
    return _snapshot(request, canonical_actions(body.actions), identity)


def snapshot_of_session(handle: SessionHandle) -> dict[str, Any]:
    """The canonical snapshot of a live session: its request and the steps it holds now."""
    session = handle.session
    trace = compress(s.token_id if s.forced else None for s in session.steps)
    return _snapshot(handle.request, trace, session.model.identity)


def _model_id(snapshot: dict[str, Any]) -> str:
    return str(snapshot["request"].get("model", LOCAL_MODEL_ID))


def differences(state: AppState, snapshot: dict[str, Any]) -> list[str]:
    """What differs between the model and libraries a snapshot was made with and the ones its
    model has here (nothing while that model is not ready; the model itself when missing)."""
    model_id = _model_id(snapshot)
    if model_id != LOCAL_MODEL_ID and model_id not in state.remotes.slots:
        return [f"model: shared with {model_id!r}, which is not configured on this server"]
    try:
        identity = state.engine_for(model_id).model.identity
    except NotReady:
        return []
    now = identity.to_dict()
    recorded = {**snapshot["model"], **snapshot["versions"]}
    labels = {
        "model_id": "model",
        "weights_sha256": "weights",
        "served_name": "served model",
        "tokenizer_sha256": "tokenizer",
        "vllm": "vLLM",
    }
    return [
        f"{labels.get(key, key)}: shared with {value}, this server has {now[key]}"
        for key, value in recorded.items()
        if now.get(key) != value
    ]


async def load(state: AppState, snapshot_id: str) -> tuple[dict[str, Any], float]:
    """A stored snapshot (read off the event loop), or PermalinkNotFound (malformed ids
    included)."""
    found = None
    if re.match(ID_PATTERN, snapshot_id):
        found = await asyncio.to_thread(state.store.get, snapshot_id)
    if found is None:
        raise PermalinkNotFound(f"no permalink {snapshot_id!r}")
    return found


def _replay_actions(session: Session, trace: list[dict[str, Any]]) -> None:
    for action in trace:
        if action["op"] == "step":
            session.run(action["n"])
        else:
            try:
                session.force(action["token_id"])
            except TokenRefused as refused:
                raise TokenRefused(
                    f"the shared trace does not replay here: {refused.message}"
                ) from None


async def open_snapshot(state: AppState, snapshot: dict[str, Any]) -> SessionHandle:
    """A new session from a snapshot's request, on its model, with its trace replayed.

    Raises:
        ModelNotConfigured: the snapshot's model is not configured on this server.
    """
    model_id = _model_id(snapshot)
    if model_id != LOCAL_MODEL_ID and model_id not in state.remotes.slots:
        raise ModelNotConfigured(
            f"this permalink was made on the model {model_id!r} "
            f"({snapshot['model'].get('served_name', 'remote')}), which is not configured on "
            'this server; open it on another model by removing "model" from its request'
        )
    body = SessionIn.model_validate(snapshot["request"])
    handle = await actions.create_session(state, body)
    async with handle.lock:
        await state.pools.steps.run(_replay_actions, handle.session, snapshot["actions"])
    return handle
