"""Why a replay was refused, for the page's Replay panel: the schema's part (in
:mod:`app.doctor.replay_cause`) fed with what the compile and the replay found; the cause in
words for every replay (a tag's, a log line's too), and one setting to try
(:mod:`app.web.services.replay_setting`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from app.doctor.replay_cause import ReplayCause, explain
from app.doctor.source_lines import json_lines, pydantic_lines
from app.engine import PRESETS, AnyEngine, ReplayResult, Validation
from app.engine.grammars.tools.base import ToolsBuild, ToolsRequest
from app.engine.grammars.tools.builders import formats_of
from app.engine.grammars.tools.request import parse_tools
from app.engine.grammars.validation import validate_output
from app.engine.stepper.refusal import spell
from app.exceptions import GrammarError
from app.web.runtime.state import AppState
from app.web.schemas.bodies import GrammarIn, OptionsIn, ReplayIn
from app.web.services import actions, serve_flags, walks
from app.web.services.replay_setting import Setting, setting_to_try

__all__ = [
    "cause_words",
    "replay_cause",
    "replay_setting",
    "schema_check",
    "walked_text",
    "with_cause",
]


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


def cause_words(result: ReplayResult, cause: ReplayCause | None, *, from_log: bool) -> str | None:
    """The replay's cause in words, for every replay that has one to give: the schema's, else
    the tag's (the engine's), else what the mask allowed where the token was refused; for an
    accepted log line, that this setup is not the one that rejected it."""
    if cause is not None:
        where = f" (schema line {cause.line})" if cause.line else ""
        return cause.message + where
    refusal = result.refusal
    if refusal is not None:
        if refusal.cause:
            return refusal.cause
        allowed = refusal.allowed.allowed_count
        return (
            f"{refusal.token!r} (id {refusal.token_id}) is not among the {allowed} tokens the "
            f"grammar allows at token #{refusal.index}"
        )
    if from_log and result.accepted:
        return (
            "vLLM's log says these tokens were rejected, and this setup accepts them: the setup "
            "is not the one that served the request"
        )
    return None


async def replay_setting(
    state: AppState,
    engine: AnyEngine,
    body: ReplayIn,
    result: ReplayResult,
    accepted_by: Sequence[str],
    *,
    from_log: bool = False,
) -> Setting | None:
    """:func:`setting_to_try` with what the compile, the builders and vLLM's registry report
    for this replay (``from_log``: its ids came from a vLLM log line)."""
    tools: ToolsRequest | None = None
    build: ToolsBuild | None = None
    parsers: list[dict[str, Any]] = []
    format_end: str | None = None
    if body.grammar.kind == "tools":
        compiled, resolved = await actions.compile_grammar(state, engine, body.grammar)  # cached
        build = compiled.tools
        try:
            parsed = await state.pools.parses.run(parse_tools, resolved.spec.source)
        except GrammarError:
            return None
        tools = parsed.request
        if tools.builder == "vllm":
            parsers = await serve_flags.reasoning_parsers(state, body.model)
        else:
            rows = {f.name: f for f in formats_of("xgrammar")}
            format_end = rows[tools.format].reasoning_end if tools.format in rows else None
    tokenizer_name = getattr(engine.model.tokens.tokenizer, "name_or_path", "")
    return setting_to_try(
        refused=_from_refusal(engine, body, result),
        tools=tools,
        build=build,
        reasoning=body.reasoning,
        parsers=parsers,
        format_end=format_end,
        model=f"{body.model} {os.path.basename(str(tokenizer_name))}",
        presets=accepted_by,
        log_rejected=from_log,
    )


#: How many replayed ids after the refused one are read for a reasoning end marker.
_AHEAD = 64


def _from_refusal(engine: AnyEngine, body: ReplayIn, result: ReplayResult) -> list[str]:
    """The spellings of the replayed ids from the refused one on (the refused one alone when a
    text came first: its tokens are counted in the index)."""
    refusal = result.refusal
    if refusal is None:
        return []
    ids = list(body.token_ids or ())
    after = ids[refusal.index + 1 : refusal.index + _AHEAD] if not body.text else []
    tokens = engine.model.tokens
    return [refusal.token, *(spell(tokens, i) for i in after)]
