"""Why a replay was refused, for the page's Replay panel: the schema's part (in
:mod:`app.doctor.replay_cause`) fed with what the compile and the replay found."""

from __future__ import annotations

import dataclasses
import json

from app.doctor.replay_cause import ReplayCause, explain
from app.doctor.source_lines import json_lines, pydantic_lines
from app.engine import PRESETS, AnyEngine, ReplayResult, Validation
from app.engine.grammars.validation import validate_output
from app.web.runtime.state import AppState
from app.web.schemas.bodies import GrammarIn, OptionsIn, ReplayIn
from app.web.services import actions, walks

__all__ = ["replay_cause", "schema_check", "walked_text", "with_cause"]


def walked_text(engine: AnyEngine, result: ReplayResult) -> str:
    """The output text of the tokens a replay walked (the refused one included): what its
    offsets count in, whether it was given as text, ids or both."""
    tokens = engine.model.tokens
    data = b"".join(tokens.output_bytes(t.token_id) for t in result.tokens)
    return data.decode("utf-8", errors="replace")


async def replay_cause(
    state: AppState,
    engine: AnyEngine,
    body: ReplayIn,
    result: ReplayResult,
    *,
    presets: bool = True,
) -> tuple[ReplayCause | None, list[str]]:
    """The cause of a replay's refusal, and for whitespace (unless ``presets`` is False), the
    presets whose options take the text past that point (found by replaying it under each)."""
    rejection = result.rejection
    if rejection is None:
        return None, []
    text = walked_text(engine, result)
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
    cause = explain(schema=schema, text=text, rejection=rejection, path=path,
                    options=spec.options, line_of=line_of)  # fmt: skip
    accepted_by: list[str] = []
    if presets and cause is not None and cause.whitespace and body.text and not body.token_ids:
        with walks.request_budget(state, "the replay"):  # the presets' walks share one budget
            for name in PRESETS:
                options = OptionsIn.model_validate(
                    {"preset": name, "root_model": body.grammar.options.root_model}
                )
                kind, source = body.grammar.kind, body.grammar.source
                grammar = GrammarIn(kind=kind, source=source, options=options)
                again = ReplayIn(grammar=grammar, text=body.text)
                other = await actions.replay(state, engine, again)
                if other.rejection is None or other.rejection.offset > rejection.offset:
                    accepted_by.append(name)
    return cause, accepted_by


async def with_cause(
    state: AppState, engine: AnyEngine, body: ReplayIn, result: ReplayResult
) -> ReplayResult:
    """``result`` with its refusal's cause in schema terms, for a JSON grammar (a structural
    tag's is the engine's own)."""
    refusal = result.refusal
    if refusal is None or refusal.cause is not None:
        return result
    cause, _ = await replay_cause(state, engine, body, result, presets=False)
    if cause is None:
        return result
    where = f" (schema line {cause.line})" if cause.line else ""
    return dataclasses.replace(
        result, refusal=dataclasses.replace(refusal, cause=cause.message + where)
    )


async def schema_check(
    state: AppState, engine: AnyEngine, body: ReplayIn, result: ReplayResult
) -> Validation | None:
    """The schema's own verdict on a text the grammar accepts whole (a Doctor finding's
    document, say): the replay then says "grammar accepts, schema rejects" with the
    validator's message (issue 45, C7). None for a refusal, an unfinished text, or a grammar
    that is no JSON Schema."""
    if result.rejection is not None or not result.complete:
        return None
    _, resolved = await actions.compile_grammar(state, engine, body.grammar)  # a cache hit
    if not resolved.spec.is_json:
        return None
    text = walked_text(engine, result)
    return await state.pools.parses.run(validate_output, resolved.spec, text, complete=True)
