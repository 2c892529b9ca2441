"""Permalinks: snapshots of a session's request and trace, and sessions reopened from them."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Sequence
from typing import Any

from app.engine import AnyEngine, ModelIdentity
from app.engine.grammars.llguidance import VERSION as LLGUIDANCE_VERSION
from app.engine.stepper.rebuild import rebuild
from app.exceptions import (
    InvalidInput,
    ModelNotConfigured,
    NotReady,
    PermalinkNotFound,
)
from app.settings import LOCAL_MODEL_ID
from app.store.permalinks import ID_PATTERN
from app.store.snapshot_format import field_defaults, without_defaults
from app.store.trace import canonical_actions, compress
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState
from app.web.schemas.bodies import (
    GrammarIn,
    OptionsIn,
    PermalinkIn,
    SchemaTestIn,
    SchemaTestsIn,
    SessionIn,
    check_test_sizes,
)
from app.web.services import actions, rejudge, schema_tests
from app.web.services.recorded import RecordedStep, chip_records, recorded_steps

__all__ = [
    "differences",
    "load",
    "load_recorded",
    "open_snapshot",
    "recorded_steps",
    "recorded_tests",
    "share_request",
    "share_session",
    "snapshot_of_request",
    "snapshot_of_session",
    "test_results",
]

_VERSION = 1
#: Fields added to the format since version 1 are left out at these values (see
#: :mod:`app.store.snapshot_format`).
_DEFAULTS = {**field_defaults(SessionIn, at="request"), "tests": []}


async def recorded_tests(
    state: AppState, engine: AnyEngine, grammar: GrammarIn, tests: Sequence[SchemaTestIn]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The tests as a snapshot keeps them: text, expectation, and the verdicts at share time
    (``passed``, the grammar's and the schema's); and the results to keep beside it (None
    without tests), which a GET then reads.

    Raises:
        GrammarTooSlow: the walks ran past ``MASKSCOPE_WALK_BUDGET_S``.
    """
    if not tests:
        return [], None
    with rejudge.walk_budget(state, "the tests").running():
        results = await schema_tests.run(state, engine, grammar, tests)
    recorded = [{**r.test.to_dict(), "recorded": r.verdicts()} for r in results]
    return recorded, rejudge.kept(rejudge.judge_key(state, engine), results)


async def test_results(
    state: AppState, engine: AnyEngine, snapshot_id: str, snapshot: dict[str, Any]
) -> list[dict[str, Any]]:
    """The snapshot's tests with the verdicts last judged here, read: never judged on this
    path. When none are kept yet, or they were judged with another model, library or walk
    budget, each test is ``"status": "pending"`` (with the verdict kept, if any) and they are
    judged again in the background; ``differs`` says a verdict is not the one recorded at
    share time."""
    stored = snapshot.get("tests") or []
    if not stored:
        return []
    verdicts = await asyncio.to_thread(state.store.get_verdicts, snapshot_id)
    final = rejudge.current(verdicts, rejudge.judge_key(state, engine), len(stored))
    if not final:
        rejudge.rejudging(state).schedule(state, engine, snapshot_id, snapshot)
    return rejudge.results(stored, verdicts, pending=not final)


def _snapshot(
    request: dict[str, Any],
    trace: list[dict[str, Any]],
    identity: ModelIdentity,
    tests: list[dict[str, Any]],
) -> dict[str, Any]:
    grammar = request["grammar"]
    engine = grammar.get("engine", "xgrammar")
    options = OptionsIn.model_validate(grammar.get("options") or {}).echo(engine)
    request = {**request, "grammar": {**grammar, "options": options}}
    request["sampling"] = dict(request["sampling"])
    if request["sampling"]["temperature"] == 0:
        request["sampling"]["seed"] = None  # greedy: the seed plays no part
    versions = {
        "xgrammar": identity.xgrammar,
        "transformers": identity.transformers,
        "torch": identity.torch,
    }
    if "llguidance" in (engine, request.get("compare")):
        versions["llguidance"] = LLGUIDANCE_VERSION
    # The local model: its id and weight hash; a remote engine: its id, served name, tokenizer
    # hash and vLLM version.
    model = {k: v for k, v in identity.to_dict().items() if k not in versions}
    content = {
        "version": _VERSION,
        "request": request,
        "actions": trace,
        "model": model,
        "versions": versions,
        "tests": tests,
    }
    return without_defaults(content, _DEFAULTS)


def snapshot_of_request(
    body: PermalinkIn, identity: ModelIdentity, *, tests: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The canonical snapshot of a permalink request (defaults filled, trace canonical, built
    in time linear in the actions: run it off the event loop all the same).

    Args:
        tests: the request's tests as :func:`recorded_tests` gives them.

    Raises:
        InvalidInput: sampling without a seed, which could not be reproduced.
    """
    if body.sampling.temperature > 0 and body.sampling.seed is None:
        raise InvalidInput(
            "a sampled trace needs its seed to be reproduced", pointer="/sampling/seed"
        )
    session = body.model_dump(exclude={"actions", "tests"})
    request = SessionIn.model_validate(session).model_dump(mode="json")
    return _snapshot(request, canonical_actions(body.actions), identity, tests or [])


def snapshot_of_session(
    handle: SessionHandle, *, tests: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The canonical snapshot of a live session: its request and the steps it holds now, and
    its tests as :func:`recorded_tests` gives them."""
    session = handle.session
    trace = compress(s.token_id if s.forced else None for s in session.steps)
    return _snapshot(handle.request, trace, session.model.identity, tests or [])


def _model_id(snapshot: dict[str, Any]) -> str:
    return str(snapshot["request"].get("model", LOCAL_MODEL_ID))


def engine_of(state: AppState, snapshot: dict[str, Any]) -> AnyEngine | None:
    """The engine a snapshot was made on, when it is configured and ready here, else None."""
    model_id = _model_id(snapshot)
    if not state.is_configured(model_id):
        return None
    try:
        return state.engine_for(model_id)
    except NotReady:
        return None


def differences(state: AppState, snapshot: dict[str, Any]) -> list[str]:
    """What differs between the model and libraries a snapshot was made with and the ones its
    model has here (nothing while that model is not ready; the model itself when missing)."""
    model_id = _model_id(snapshot)
    if not state.is_configured(model_id):
        return [f"model: shared with {model_id!r}, which is not configured on this server"]
    engine = engine_of(state, snapshot)
    if engine is None:
        return []
    now = {**engine.model.identity.to_dict(), "llguidance": LLGUIDANCE_VERSION}
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


async def load_recorded(state: AppState, snapshot_id: str) -> list[RecordedStep]:
    """The steps a permalink recorded at share time, for its chips (read off the event loop);
    none for an older permalink, or one shared through the API without a session."""
    return recorded_steps(await asyncio.to_thread(state.store.get_records, snapshot_id))


async def open_snapshot(
    state: AppState,
    snapshot: dict[str, Any],
    *,
    model: str | None = None,
    snapshot_id: str | None = None,
    batched: bool = True,
) -> SessionHandle:
    """A new session from a snapshot's request, on its model (or on ``model``), with its trace
    replayed.

    With the permalink's id, its recorded steps (kept at share time) give the tokens of the
    trace's steps: their forward passes run in one pass (:mod:`app.engine.stepper.rebuild`).
    The steps are still taken one by one, each appended to the session as it ends (what
    :mod:`app.web.services.rebuilds` reports as the rebuild's progress).

    Args:
        model: the model to open it on instead of its own.
        snapshot_id: the permalink's id, for its recorded steps.
        batched: False runs a forward pass a step, as before #45 (the bench's baseline).

    Raises:
        ModelNotConfigured: the snapshot's model is not configured on this server, and no
            other model was named.
        TokenRefused: a forced token of the trace is blocked here.
    """
    model_id = _model_id(snapshot)
    own_model = model is None or model == model_id
    if model is not None:
        snapshot = {**snapshot, "request": {**snapshot["request"], "model": model}}
    elif not state.is_configured(model_id):
        raise ModelNotConfigured(
            f"this permalink was made on the model {model_id!r} "
            f"({snapshot['model'].get('served_name', 'remote')}), which is not configured on "
            'this server; open it on another model by naming one ("model")'
        )
    body = SessionIn.model_validate(snapshot["request"])
    tokens = None
    if snapshot_id is not None and own_model:  # another model numbers its tokens otherwise
        tokens = [r.token_id for r in await load_recorded(state, snapshot_id)]
    handle = await actions.create_session(state, body)
    replay = functools.partial(
        rebuild, handle.session, snapshot["actions"], tokens=tokens, batched=batched
    )
    async with handle.lock:
        await state.pools.steps.run(replay)
    return handle


async def share_request(state: AppState, body: PermalinkIn) -> tuple[str, bool]:
    """Store the snapshot a permalink request describes, with its schema unit tests run and
    their verdicts kept with them.

    Returns:
        The snapshot's id, and whether it is new (equal content gives an equal id).
    """
    body.check_size(state.settings)
    check_test_sizes(body.tests)
    engine = state.engine_for(body.model)
    tests, verdicts = await recorded_tests(state, engine, body.grammar, body.tests)

    def store() -> tuple[str, bool]:
        snapshot = snapshot_of_request(body, engine.model.identity, tests=tests)
        stored = state.store.put(snapshot)
        if verdicts is not None:  # beside the snapshot: what its GETs read
            state.store.put_verdicts(stored[0], verdicts)
        return stored

    return await asyncio.to_thread(store)


async def share_session(state: AppState, handle: SessionHandle, body: SchemaTestsIn) -> str:
    """Store an open session as a snapshot, with the tests of ``body`` run on its grammar and
    their verdicts; the snapshot's id."""
    check_test_sizes(body.tests)
    engine = state.engine_for(handle.request["model"])
    tests, verdicts = await recorded_tests(state, engine, body.grammar, body.tests)

    records = chip_records(handle.session.steps)

    def store() -> tuple[str, bool]:
        stored = state.store.put(snapshot_of_session(handle, tests=tests))
        # Beside the snapshot, not in it: the id stays the hash of the content.
        state.store.put_records(stored[0], records)
        if verdicts is not None:
            state.store.put_verdicts(stored[0], verdicts)
        return stored

    snapshot_id, _ = await asyncio.to_thread(store)
    return snapshot_id
