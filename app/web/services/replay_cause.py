"""Why a replay was refused, for the page's Replay panel: the schema's part (in
:mod:`app.doctor.replay_cause`) fed with what the compile and the replay found."""

from __future__ import annotations

import json

from app.doctor.replay_cause import ReplayCause, explain
from app.doctor.source_lines import json_lines, pydantic_lines
from app.engine import PRESETS, AnyEngine, ReplayResult
from app.web.bodies import GrammarIn, OptionsIn, ReplayIn
from app.web.services import actions
from app.web.state import AppState

__all__ = ["replay_cause"]


async def replay_cause(
    state: AppState, engine: AnyEngine, body: ReplayIn, result: ReplayResult
) -> tuple[ReplayCause | None, list[str]]:
    """The cause of a replay's refusal, and for whitespace, the presets whose options take the
    text past that point (found by replaying it under each)."""
    rejection = result.rejection
    if rejection is None or body.text is None:
        return None, []
    _, resolved = await actions.compile_grammar(state, engine, body.grammar)  # a cache hit
    spec = resolved.spec
    if not spec.is_json:
        return None, []
    derived = resolved.pydantic
    schema = derived.schema if derived else json.loads(spec.source)
    line_of = (
        pydantic_lines(body.grammar.source, derived.root) if derived else json_lines(spec.source)
    )
    tokens = result.tokens
    path = tokens[rejection.token_index].path if rejection.token_index < len(tokens) else "$"
    cause = explain(schema=schema, text=body.text, rejection=rejection, path=path,
                    options=spec.options, line_of=line_of)  # fmt: skip
    accepted_by: list[str] = []
    if cause is not None and cause.whitespace:
        for name in PRESETS:
            options = OptionsIn.model_validate(
                {"preset": name, "root_model": body.grammar.options.root_model}
            )
            grammar = GrammarIn(kind=body.grammar.kind, source=body.grammar.source, options=options)
            other = await actions.replay(state, engine, ReplayIn(grammar=grammar, text=body.text))
            if other.rejection is None or other.rejection.offset > rejection.offset:
                accepted_by.append(name)
    return cause, accepted_by
