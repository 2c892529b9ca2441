"""Code export: the request the snippets reproduce, from a session request or an open session."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from app.doctor.backends import sglang as sglang_rules
from app.doctor.backends import vllm as vllm_rules
from app.doctor.backends.llguidance import Llguidance
from app.doctor.records import Verdict
from app.engine import AnyEngine, ChatMessage, GrammarKind, render_prompt
from app.engine.grammars.structural_tag import parse_tag
from app.engine.grammars.tools.compile import tag_source
from app.exceptions import GrammarError
from app.export import ExportRequest, Message, PydanticSource, Sampling
from app.export.tools import tools_export
from app.jsontext import loads
from app.sandbox.sandbox import PydanticSchema
from app.settings import EMBEDDED_HF_ID, EMBEDDED_MODEL, Settings
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState
from app.web.schemas.bodies import SessionIn
from app.web.services import actions

__all__ = ["export_request", "from_session", "served_model"]


def served_model(settings: Settings) -> str:
    """The name a server serves the configured model under (the hub id for the embedded one)."""
    return EMBEDDED_HF_ID if settings.model == EMBEDDED_MODEL else settings.model


def _schema(source: str) -> Any:
    try:
        return loads(source)
    except json.JSONDecodeError as exc:
        raise GrammarError(
            f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno, pointer="/grammar/source"
        ) from None


async def export_request(
    state: AppState, body: SessionIn, *, prompt_text: str | None = None
) -> ExportRequest:
    """What the snippets reproduce: the grammar as compiled, options, prompt, sampling.

    Args:
        state: the app (its sandbox derives a Pydantic source's schema).
        body: the session request (a grammar request has no messages); its ``model`` renders
            the chat template when ``prompt_text`` is not given, and names the served model.
        prompt_text: the prompt a live session rendered.
    """
    engine = state.engine_for(body.model)
    resolved = await actions.resolve(state, body.grammar, engine)
    spec = resolved.spec
    messages = body.chat_messages(spec) if body.raw_prompt is None else []
    if prompt_text is None and messages:
        prompt_text = await asyncio.to_thread(_rendered, engine, messages)
    derived = resolved.pydantic
    sampling = body.sampling
    schema = _schema(spec.source) if spec.is_json else None
    # llguidance compiles the schema as vLLM's guidance backend would: on the bounded pool
    route = await state.pools.parses.run(_vllm_route, engine, schema)
    kind, source, legacy_tag = spec.kind, spec.source, None
    if spec.kind is GrammarKind.STRUCTURAL_TAG:  # as compiled: a legacy tag in its current form
        parsed = await state.pools.parses.run(parse_tag, source)
        source = parsed.tag_json
        legacy_tag = json.loads(spec.source) if parsed.legacy else None
    tools = None
    if spec.kind is GrammarKind.TOOLS:  # the tag its builder made, sent as a structural tag
        result = await actions.compiled(state, engine, spec)
        assert result.tools is not None, "a tools source compiles with its build"
        tools = tools_export(
            json.loads(spec.source), result.tools, stack_reasoning=getattr(body, "reasoning", None)
        )
        kind, source = GrammarKind.STRUCTURAL_TAG, tag_source(result.tools)
    return ExportRequest(
        kind=kind,
        source=source,
        schema=schema,
        options=spec.options,
        preset=body.grammar.options.preset,
        model=engine.model.identity.served_name or served_model(state.settings),
        messages=tuple(Message(m.role, m.content) for m in messages),
        raw_prompt=body.raw_prompt,
        prompt_text=prompt_text,
        sampling=Sampling(sampling.temperature, sampling.top_p, sampling.seed),
        max_tokens=body.max_tokens,
        pydantic=_pydantic(derived),
        legacy_tag=legacy_tag,
        tools=tools,
        refusals=_refusals(schema),
        **route,
    )


def _refusals(schema: Any) -> tuple[tuple[str, str], ...]:
    """The stacks whose Doctor row refuses the schema, with that row's messages (Code never
    advises them, issue 45, B7): SGLang's pre-check. OpenAI's strict row stays a note in its
    snippet (its parse helper sends its own strict schema for a Pydantic source)."""
    if schema is None:
        return ()
    rows = [sglang_rules.assess(schema, xgrammar_ignores=False)]
    return tuple(
        (row.backend.removesuffix("_strict"), "; ".join(m.message for m in row.messages))
        for row in rows
        if row.verdict is Verdict.REFUSES
    )


def _rendered(engine: AnyEngine, messages: Sequence[ChatMessage]) -> str | None:
    """The prompt as the model's chat template renders it; None when its tokenizer has none (a
    tokenizer-only model: the server's own template renders the messages, issue 45, B2)."""
    tokens = engine.model.tokens
    if not getattr(tokens.tokenizer, "chat_template", None):
        return None
    return render_prompt(tokens, messages).text


def _pydantic(derived: PydanticSchema | None) -> PydanticSource | None:
    """What the snippets may carry of a Pydantic source: the source the sandbox ran (methods
    removed), never the request's text, whose validators the sandbox never ran."""
    if derived is None:
        return None
    return PydanticSource(derived.ran, derived.root, derived.stripped)


def _vllm_route(engine: AnyEngine, schema: Any) -> dict[str, Any]:
    """Where vLLM's ``auto`` sends a schema its xgrammar pre-check refuses (the Doctor's vllm
    rules): the reasons, and whether guidance (llguidance, run here with the model's tokenizer
    as vLLM compiles it) or outlines takes it. Empty when xgrammar takes it."""
    reasons = vllm_rules.unsupported(schema) if schema is not None else []
    if not reasons:
        return {}
    outlines = _has_pattern_properties(schema)
    return {
        "vllm_fallback": "; ".join(f"{r.message} at {r.pointer or '/'}" for r in reasons),
        "vllm_outlines": outlines,
        "vllm_guidance_error": (
            "" if outlines else Llguidance(engine.llguidance).schema_error(schema)
        ),
    }


def _has_pattern_properties(node: Any) -> bool:
    """``has_guidance_unsupported_json_features``: patternProperties in any schema object."""
    if isinstance(node, dict):
        return "patternProperties" in node or any(map(_has_pattern_properties, node.values()))
    return isinstance(node, list) and any(map(_has_pattern_properties, node))


async def from_session(state: AppState, handle: SessionHandle) -> ExportRequest:
    """What the snippets reproduce for an open session: its request and its rendered prompt."""
    body = SessionIn.model_validate(handle.request)
    return await export_request(state, body, prompt_text=handle.session.prompt.text)
