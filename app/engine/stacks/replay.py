"""A replay under a serving stack: each step's mask is the row that release's scheduler applies.

The stack's runner does the work with vLLM's own classes (``vllm_masks.replay``): the request's
constraint as that release derives it (a ``tools`` source is built again there, so that
``required`` with strict calling off is the JSON Schema vLLM really uses, and a tag is the tag it
really builds), its backend, its reasoning parser's end detection and its
``StructuredOutputManager.grammar_bitmask``. Here the answer becomes a
:class:`~app.engine.records.ReplayResult` in the vocabulary of the model, with the stack and the
library that filled the masks (``mask_by``), and a refusal's cause in the stack's terms.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from app.engine.grammars.reasoning import tag_of
from app.engine.grammars.spec import CompileResult, GrammarKind
from app.engine.grammars.tools.request import parse_tools
from app.engine.grammars.tools.vllm_builder import build_message
from app.engine.mask import allowed_vector
from app.engine.mask_summary import summarize_mask
from app.engine.records import Refusal, Rejection, ReplayResult, ReplayToken
from app.engine.stack_pins import ServeFlags
from app.engine.stacks.causes import stack_cause
from app.engine.stepper.refusal import spell
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
) -> ReplayResult:
    """Walk ``text`` (tokenized as the model would) then ``token_ids`` as the stack
    ``builder`` runs would, on ``tokenizer``.

    Args:
        grammar: the compiled source (its kind and source are what the request carries).
        tokens: the model's vocabulary (its size is the rows' width).
        bitmask_for: the indices whose row is kept (a refused step's always is).
        prompt_ids: the prompt's ids (a prompt that closed the reasoning masks from token 0).

    Raises:
        InvalidInput: an id outside the vocabulary.
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
) -> StackWalk:
    """:func:`stack_replay` of the token ids ``ids``, with the grammar the stack masked with.

    Raises:
        InvalidInput: an id outside the vocabulary.
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
    message, strict = _message(grammar, ids, bitmask_for, flags)
    message["vocab_size"] = tokens.vocab_size
    message["prompt_token_ids"] = list(prompt_ids)
    answer = builder.replay(message, tokenizer, strict)
    versions = builder.versions()
    mask_by = {"stack": builder.stack.name, **answer["mask_by"]}
    steps = tuple(_token(tokens, step) for step in answer["steps"])
    grammar_text = str(answer.get("grammar_text") or "")
    if answer["refused_at"] is None:
        result = ReplayResult(True, bool(answer["terminated"]), steps, None, mask_by=mask_by)
        return StackWalk(result, grammar_text)
    rejection, refusal = _refusal(tokens, answer, ids, versions, flags)
    result = ReplayResult(False, False, steps, rejection, refusal=refusal, mask_by=mask_by)
    return StackWalk(result, grammar_text)


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
