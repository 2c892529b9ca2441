"""The template round trip of a ``tools`` source, and the Doctor's finding ``template_refused``.

:func:`app.doctor.roundtrip.round_trip` replays what a chat template writes through a tag; this
module gives it what a ``tools`` source names: the template (the source's pasted
``chat_template``, else the model's own, else its family's shipped one), the tools, and the tag
the source's builder (or a stack's) builds for the same request with reasoning off and on. The
cases with reasoning are kept only when the source names a ``reasoning_parser``: without one the
server masks the reasoning too, and a refusal there says nothing about the format.

It runs where the builder is: in the server (the web layer, or the server side of the Doctor's
worker processes, :mod:`app.doctor.worker`), never in a Doctor process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app.doctor.records import DoctorReport, Finding
from app.doctor.roundtrip import REFUSES_OWN_FORMAT, RoundTrip, round_trip
from app.engine.grammars.spec import GrammarKind, GrammarSpec
from app.engine.grammars.tools.base import ToolsBuild, ToolsRequest
from app.engine.model.chat_templates import ChatTemplate, template_for
from app.exceptions import GrammarError, InvalidInput

if TYPE_CHECKING:
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

__all__ = [
    "TEMPLATE_REFUSED",
    "BuildTag",
    "default_build",
    "source_round_trip",
    "source_template",
    "template_findings",
    "with_template_finding",
]

#: The finding's ``direction``: the grammar refuses what the model's own template writes.
TEMPLATE_REFUSED = "template_refused"
#: The pointer of a pasted template, in the tools source.
_TEMPLATE_POINTER = "/chat_template"

#: Builds the tag of a request (the source's builder, or a stack's runner, on the model's
#: tokenizer).
BuildTag = Callable[[ToolsRequest], ToolsBuild]


def source_template(engine: Any, request: ToolsRequest) -> ChatTemplate:
    """The template the round trip renders with: the source's ``chat_template``, else the
    model's (see :func:`~app.engine.model.chat_templates.template_for`).

    Raises:
        InvalidInput: the model has no template and the source pastes none (``/chat_template``).
    """
    shipped = getattr(getattr(engine.model, "spec", None), "tokenizer", None)
    return template_for(engine.model.tokens, shipped=shipped, pasted=request.chat_template)


def source_round_trip(
    engine: Any,
    request: ToolsRequest,
    build: BuildTag,
    *,
    examples: Sequence[dict[str, Any]] = (),
    stack: VllmBuilder | None = None,
    tokenizer: str | None = None,
) -> list[RoundTrip]:
    """Every case of ``request``'s tools rendered by its template and replayed through the tag
    ``build`` makes for it (reasoning cases only under a ``reasoning_parser``); under ``stack``
    each turn is walked by the stack's own code, which derives the request again on
    ``tokenizer`` (see :func:`~app.doctor.roundtrip.round_trip`).

    Raises:
        InvalidInput: no template (``/chat_template``), it fails to render (``/chat_template``),
            or it is a stack's encoder, which renders in the stack's runner only.
        GrammarError: the builder builds no tag for the request, or refuses it.
    """
    template = source_template(engine, request)

    def request_for(reasoning: bool) -> ToolsRequest:
        return dataclasses.replace(
            request,
            reasoning="enabled" if reasoning else "disabled",
            reasoning_parser=request.reasoning_parser if reasoning else None,
        )

    def tag_for(reasoning: bool) -> tuple[dict[str, Any] | str, str | None]:
        built = build(request_for(reasoning))
        if built.tag is None:
            raise GrammarError(f"the builder builds no tag for this request: {built.reason}")
        return built.tag, built.reasoning_end

    tools = [dict(tool) for tool in request.tools]
    results = round_trip(
        engine, template, tools, tag_for, examples=examples, stack=stack, tokenizer=tokenizer,
        request_for=request_for if stack is not None else None,
    )  # fmt: skip
    return [r for r in results if not r.reasoning or request.reasoning_parser]


def template_findings(results: Sequence[RoundTrip], *, pasted: bool) -> tuple[Finding, ...]:
    """One ``template_refused`` finding per refused case: the rendered turn as its example,
    the refused character marked; the note says the offset, what the template wrote there,
    what the tag allows and the cause."""
    found = []
    for r in results:
        if r.accepted or r.offset is None:
            continue
        allows = ", ".join(repr(a) for a in r.allowed[:5]) or "nothing"
        note = f"at offset {r.offset} the template writes {r.wrote!r}; the tag allows {allows}"
        found.append(
            Finding(
                cause=f"{REFUSES_OWN_FORMAT}: {r.case}{' with reasoning' if r.reasoning else ''}",
                direction=TEMPLATE_REFUSED,
                keywords=(),
                pointers=(_TEMPLATE_POINTER,) if pasted else (),
                count=1,
                example=r.text,
                span=(r.offset, min(r.offset + 1, len(r.text))),
                note=note + (f"; {r.cause}" if r.cause else ""),
            )
        )
    return tuple(found)


def with_template_finding(
    report: DoctorReport, engine: Any, spec: GrammarSpec, build: BuildTag | None = None
) -> DoctorReport:
    """``report`` with the round trip's findings added, for a ``tools`` source whose model has a
    chat template (or that pastes one); other reports as they are.

    A model's own template that cannot render the turn, a stack's encoder, or a request the
    builder builds no tag for leave no finding; a pasted template that fails to render is the
    source's error.

    Args:
        report: the examination's report.
        engine: the server's engine (its builds are cached: the source's was made to compile).
        spec: what was examined.
        build: builds a request's tag (default: the source's own builder on the engine's
            tokenizer).

    Raises:
        GrammarError: the pasted ``chat_template`` fails to render (pointed at it).
    """
    if spec.kind is not GrammarKind.TOOLS:
        return report
    parsed, built = engine.tools.build(spec)
    if built.tag is None:
        return report
    request = parsed.request
    build = build or default_build(engine)
    pasted = request.chat_template is not None
    try:
        results = source_round_trip(engine, request, build)
    except InvalidInput as error:
        if pasted and error.pointer == _TEMPLATE_POINTER:
            raise GrammarError(error.message, pointer=_TEMPLATE_POINTER) from None
        return report
    except GrammarError:
        return report
    found = template_findings(results, pasted=pasted)
    if not found:
        return report
    return dataclasses.replace(report, findings=(*report.findings, *found))


def default_build(engine: Any) -> BuildTag:
    """Builds a request's tag with its own builder on ``engine``'s tokenizer, as a compile of
    the source does."""
    from app.engine.grammars.tools.builders import builder

    tokenizer = engine.tools.tokenizer
    return lambda request: builder(request.builder).build(request, tokenizer)
