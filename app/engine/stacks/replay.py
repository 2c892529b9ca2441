"""A replay under a serving stack: each step's mask is the row that release's scheduler applies.

The stack's runner does the work with vLLM's own classes (``vllm_masks.replay``): the request's
constraint as that release derives it (a ``tools`` source is built again there, so that
``required`` with strict calling off is the JSON Schema vLLM really uses, and a tag is the tag it
really builds), its backend, its reasoning parser's end detection and its
``StructuredOutputManager.grammar_bitmask``. Here the answer becomes a
:class:`~app.engine.records.ReplayResult` in the vocabulary of the model, with the stack and the
library that filled the masks (``mask_by``), and a refusal's cause in the stack's terms.

With end rules (``min_tokens``, ``stop_token_ids``, ``stop``), the request carries its
``stop_token_ids`` (so the stack hands xgrammar its whole stop set), every row comes back, and
one more step is walked after the last token, the model's end token, to read the stack's row
there (where a complete document allows only a stop); that step is not part of the answer's
tokens, only of its ``end`` report (:class:`~app.engine.stepper.stops.EndWalk`, fed the stack's
rows).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from app.engine.grammars.reasoning import tag_of
from app.engine.grammars.spec import CompileResult, GrammarKind
from app.engine.grammars.tools.request import parse_tools
from app.engine.grammars.tools.vllm_builder import build_message
from app.engine.mask import allowed_array, allowed_vector
from app.engine.mask_summary import summarize_mask
from app.engine.records import Refusal, Rejection, ReplayResult, ReplayToken
from app.engine.stack_pins import ServeFlags
from app.engine.stacks.causes import stack_cause
from app.engine.stepper.refusal import spell
from app.engine.stepper.stops import EndRules, EndWalk, end_walk
from app.engine.tokens import Tokens
from app.exceptions import InvalidInput

if TYPE_CHECKING:
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

__all__ = ["ServeFlags", "StackWalk", "stack_replay", "stack_walk"]

_EXPECTED_SAMPLE = 20


def _constraint(grammar: CompileResult) -> dict[str, Any]:
    """What the request carries for a grammar that is not a ``tools`` source."""
    kind, source = grammar.spec.kind, grammar.spec.source
    if kind is GrammarKind.JSON_SCHEMA:
        return {"json": source}
    if kind is GrammarKind.REGEX:
        return {"regex": source}
    if kind is GrammarKind.EBNF:
        return {"grammar": source}
    return {"structural_tag": json.dumps(tag_of(grammar))}


def _message(
    grammar: CompileResult, ids: list[int], keep: Collection[int], serve: ServeFlags
) -> tuple[dict[str, Any], bool | None]:
    message: dict[str, Any] = {
        "token_ids": ids,
        "keep": sorted(i for i in keep if 0 <= i < len(ids)),
        "reasoning_parser": serve.reasoning_parser,
        "structured_outputs_config": dict(serve.structured_outputs_config),
        "chat_template_kwargs": dict(serve.chat_template_kwargs),
    }
    if grammar.spec.kind is GrammarKind.TOOLS:
        request = parse_tools(grammar.spec.source).request
        message["build"] = build_message(request)
        return message, request.strict_tool_calling
    message["structured_outputs"] = _constraint(grammar)
    return message, None


@dataclass(frozen=True)
class StackWalk:
    """A replay under a stack, with the grammar its backend masked with (``grammar_text``: that
    release's xgrammar EBNF, or the spec vLLM handed its guidance backend)."""

    result: ReplayResult
    grammar_text: str


def stack_replay(
    builder: VllmBuilder,
    grammar: CompileResult,
    tokens: Tokens,
    *,
    tokenizer: str,
    text: str | None = None,
    token_ids: Sequence[int] = (),
    bitmask_for: Collection[int] = (),
    serve: ServeFlags | None = None,
    prompt_ids: Sequence[int] = (),
    end_rules: EndRules | None = None,
    model: Any = None,
) -> ReplayResult:
    """Walk ``text`` (tokenized as the model would) then ``token_ids`` as the stack
    ``builder`` runs would, on ``tokenizer``.

    Args:
        grammar: the compiled source (its kind and source are what the request carries).
        tokens: the model's vocabulary (its size is the rows' width).
        bitmask_for: the indices whose row is kept (a refused step's always is).
        prompt_ids: the prompt's ids (a prompt that closed the reasoning masks from token 0).
        end_rules: ``min_tokens``, ``stop_token_ids`` and ``stop``: the result's ``end`` reports
            the end of generation on the stack's rows.
        model: the model whose stop ids these are (where its stop list came from, in words).

    Raises:
        InvalidInput: an id outside the vocabulary, or a bad end rule (its pointer).
        GrammarError: the stack refuses the request, or is unavailable.
    """
    return stack_walk(
        builder,
        grammar,
        tokens,
        tokenizer=tokenizer,
        ids=(tokens.encode(text) if text else []) + list(token_ids),
        bitmask_for=bitmask_for,
        serve=serve,
        prompt_ids=prompt_ids,
        end_rules=end_rules,
        model=model,
    ).result


def stack_walk(
    builder: VllmBuilder,
    grammar: CompileResult,
    tokens: Tokens,
    *,
    tokenizer: str,
    ids: Sequence[int],
    bitmask_for: Collection[int] = (),
    serve: ServeFlags | None = None,
    prompt_ids: Sequence[int] = (),
    end_rules: EndRules | None = None,
    model: Any = None,
) -> StackWalk:
    """:func:`stack_replay` of the token ids ``ids``, with the grammar the stack masked with.

    Raises:
        InvalidInput: an id outside the vocabulary, or a bad end rule (its pointer).
        GrammarError: the stack refuses the request, or is unavailable.
    """
    ids = list(ids)
    for position, token_id in enumerate(ids):
        if not 0 <= token_id < tokens.vocab_size:
            raise InvalidInput(
                f"token_ids[{position}] = {token_id} is outside the vocabulary",
                pointer=f"/token_ids/{position}",
            )
    flags = serve or ServeFlags()
    end = None if end_rules is None else _stack_end(grammar, tokens, end_rules, model)
    probe = None if end is None else _probe(end)
    walked = ids if probe is None else [*ids, probe]
    keep = range(len(walked)) if end is not None else bitmask_for
    message, strict = _message(grammar, walked, keep, flags)
    message["vocab_size"] = tokens.vocab_size
    message["prompt_token_ids"] = list(prompt_ids)
    if end_rules is not None:
        message["stop_token_ids"] = list(end_rules.stop_token_ids)
    answer = builder.replay(message, tokenizer, strict)
    if end is not None:
        answer = _ended(answer, end, tokens, len(ids), set(bitmask_for))
    versions = builder.versions()
    mask_by = {"stack": builder.stack.name, **answer["mask_by"]}
    steps = tuple(_token(tokens, step) for step in answer["steps"])
    grammar_text = str(answer.get("grammar_text") or "")
    ended = answer.get("end")
    if answer["refused_at"] is None:
        complete = bool(answer["terminated"])
        result = ReplayResult(True, complete, steps, None, mask_by=mask_by, end=ended)
        return StackWalk(result, grammar_text)
    rejection, refusal = _refusal(tokens, answer, ids, versions, flags)
    result = ReplayResult(
        False, False, steps, rejection, refusal=refusal, mask_by=mask_by, end=ended
    )
    return StackWalk(result, grammar_text)


def _stack_end(grammar: CompileResult, tokens: Tokens, rules: EndRules, model: Any) -> EndWalk:
    """The end walk of a replay under a stack: the grammar's stops are the whole set vLLM hands
    xgrammar (``all_stop_token_ids``), the request's ``stop_token_ids`` among them."""
    walk = end_walk(grammar, tokens, rules, model=model)
    stops = dataclasses.replace(walk.stops, grammar_stops=walk.stops.to_xgrammar)
    return EndWalk(tokens, rules, stops)


def _probe(end: EndWalk) -> int | None:
    """The token walked after the last one, to read the stack's row there: the model's EOS
    (None: the model has no stop token at all)."""
    stops = end.stops
    if stops.tokenizer_eos is not None:
        return stops.tokenizer_eos
    return stops.to_xgrammar[0] if stops.to_xgrammar else None


def _ended(
    answer: dict[str, Any], end: EndWalk, tokens: Tokens, walked: int, keep: set[int]
) -> dict[str, Any]:
    """``answer`` without its probe step, its rows fed to ``end`` (the report as ``end``), and
    only the rows the caller asked for kept."""
    steps = list(answer["steps"])
    probe = steps[walked] if len(steps) > walked else None
    steps = steps[:walked]
    refused_at = answer["refused_at"]
    if refused_at == walked:
        refused_at = None
    for index, step in enumerate(steps):
        taken = step["allowed"] and step.get("accepted", False)
        end.step(index, _row(step, tokens), step["token_id"] if taken else None)
    if probe is not None:
        end.step(walked, _row(probe, tokens), None)
    # the probe, when the grammar took it, ended the grammar: the ids alone did not
    took_probe = probe is not None and probe["allowed"] and probe.get("accepted", False)
    kept = [
        step if index in keep or index == refused_at else _without_row(step)
        for index, step in enumerate(steps)
    ]
    return answer | {
        "steps": kept,
        "refused_at": refused_at,
        "terminated": bool(answer["terminated"]) and not took_probe,
        "end": end.report().to_dict(),
    }


def _row(step: dict[str, Any], tokens: Tokens) -> Any:
    """A step's row as the end walk takes it (None: unmasked, the reasoning is open)."""
    if not step["masked"] or step.get("bitmask") is None:
        return None
    words = torch.frombuffer(bytearray(base64.b64decode(step["bitmask"])), dtype=torch.int32)
    return allowed_array(words, tokens.vocab_size)


def _without_row(step: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in step.items() if key != "bitmask"}


def _token(tokens: Tokens, step: dict[str, Any]) -> ReplayToken:
    data = step.get("bitmask")
    return ReplayToken(
        token_id=step["token_id"],
        text=tokens.text(step["token_id"]),
        accepted=bool(step["allowed"] and step["accepted"]),
        allowed_count=int(step["allowed_count"]),
        depth=0,
        path="",
        rules=(),
        bitmask=base64.b64decode(data) if data is not None else None,
        masked=bool(step["masked"]),
    )


def _refusal(
    tokens: Tokens,
    answer: dict[str, Any],
    ids: list[int],
    versions: dict[str, str],
    serve: ServeFlags,
) -> tuple[Rejection, Refusal]:
    index = int(answer["refused_at"])
    step = answer["steps"][index]
    row = base64.b64decode(step["bitmask"])
    consumed = b"".join(tokens.output_bytes(t) for t in ids[:index])
    words = torch.frombuffer(bytearray(row), dtype=torch.int32)
    allowed = allowed_vector(words, tokens.vocab_size).nonzero().flatten().tolist()
    token = spell(tokens, ids[index])
    rejection = Rejection(
        offset=len(consumed.decode("utf-8", errors="ignore")),
        token_index=index,
        token_text=tokens.text(ids[index]),
        expected=tuple(tokens.shortest_texts(allowed, _EXPECTED_SAMPLE)),
    )
    summary = summarize_mask(row, tokens)
    listed = None
    if summary.allowed_ids is not None:
        listed = tuple(spell(tokens, i) for i in summary.allowed_ids)
    text = consumed.decode("utf-8", errors="replace")
    cause = stack_cause(
        answer, tokens=tokens, ids=ids, versions=versions, serve=serve, allowed=listed
    )
    refusal = Refusal(
        index=index,
        token_id=ids[index],
        token=token,
        special=ids[index] in tokens.special_ids,
        rules=(),
        after=text[-60:],
        allowed=summary,
        allowed_tokens=listed,
        cause=cause,
    )
    return rejection, refusal
