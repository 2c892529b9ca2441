"""``POST /api/roundtrip``: a ``tools`` source's tool-call turns, as the chat template writes
them, replayed through the tag its builder (or a stack's) makes (:mod:`app.doctor.tools_roundtrip`).

The source is resolved as a compile resolves it (its ``$model`` parameters derived in the
sandbox, then built on the ``compiles`` pool); the round trip itself (the renders, the builds,
the tag's compiles and the replays) runs on a ``compiles`` pool thread under the request's walk
budget, as a replay does.
"""

from __future__ import annotations

from typing import Any

from app.doctor.roundtrip import RoundTrip
from app.doctor.tools_roundtrip import BuildTag, default_build, source_round_trip
from app.engine import AnyEngine
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.stack_pins import MASKSCOPE
from app.engine.stacks import runner
from app.exceptions import InvalidInput
from app.web.runtime.state import AppState
from app.web.schemas.roundtrip import RoundTripIn
from app.web.services import actions, walks

__all__ = ["answer", "roundtrip"]

#: How the round trip names its cases (its words) -> the contract's ``case``.
_CASES = (
    ("one call ", "one_call"),
    ("two parallel calls", "parallel"),
    ("example call ", "example"),
)


async def roundtrip(state: AppState, engine: AnyEngine, body: RoundTripIn) -> list[RoundTrip]:
    """Every case of the source rendered and replayed (see the module).

    Raises:
        InvalidInput: the grammar is not a ``tools`` source (``/grammar/kind``), no such stack
            (``/stack``), a call names no tool of the source (``/calls/<i>/name``), the model has
            no chat template and the source pastes none, or the template fails to render
            (``/chat_template``).
        GrammarError: the source is invalid (pointed into it), or the builder builds no tag.
    """
    if body.grammar.kind != "tools":
        raise InvalidInput(
            "the round trip takes a tools source (its tools, the tag its builder makes and the "
            f"chat template), not {body.grammar.kind}",
            pointer="/grammar/kind",
        )
    stacked = None if body.stack == MASKSCOPE else runner(state.settings, body.stack)
    build = _build(engine, stacked)
    resolved = await actions.resolve(state, body.grammar, engine)
    # the source's own build (a builder's process call, cached by source), as a compile waits
    parsed, _ = await state.pools.compiles.run(engine.tools.build, resolved.spec)
    examples = _examples(parsed.request, body)
    return await walks.walked(
        state,
        state.pools.compiles,
        "the round trip",
        source_round_trip,
        engine,
        parsed.request,
        build,
        examples=examples,
        stack=stacked,
        tokenizer=engine.tools.tokenizer if stacked is not None else None,
    )


def _build(engine: AnyEngine, stacked: VllmBuilder | None) -> BuildTag:
    if stacked is None:
        return default_build(engine)
    tokenizer = engine.tools.tokenizer
    return lambda request: stacked.build(request, tokenizer)


def _examples(request: ToolsRequest, body: RoundTripIn) -> list[dict[str, Any]]:
    names = [tool["function"]["name"] for tool in request.tools]
    for index, call in enumerate(body.calls):
        if call.name not in names:
            raise InvalidInput(
                f"calls[{index}] names {call.name!r}, which is no tool of the source "
                f"(tools: {', '.join(names) or 'none'})",
                pointer=f"/calls/{index}/name",
            )
    return [{"name": call.name, "arguments": call.arguments} for call in body.calls]


def answer(result: RoundTrip) -> dict[str, Any]:
    """One case as the contract answers it: ``case`` (``one_call``, ``parallel``,
    ``example``), ``reasoning``, ``label`` (in words), ``tool`` (a one-tool case's),
    ``rendered`` (the turn after the generation prompt), ``accepted``; a refused case adds
    ``offset``, ``template_wrote``, ``tag_allows`` and ``cause``."""
    case, tool = result.case.replace(" ", "_"), None
    for words, name in _CASES:
        if result.case.startswith(words):
            case, tool = name, result.case[len(words) :] or None
            break
    out: dict[str, Any] = {
        "case": case,
        "reasoning": result.reasoning,
        "label": result.case + (" with reasoning" if result.reasoning else ""),
        "tool": tool if case != "parallel" else None,
        "rendered": result.text,
        "accepted": result.accepted,
    }
    if not result.accepted:
        out |= {
            "offset": result.offset,
            "template_wrote": result.wrote,
            "tag_allows": list(result.allowed),
            "cause": result.cause,
        }
    return out
