"""A refusal under a serving stack, in that stack's own terms.

What the release decided is said as its code decided it: the constraint it derived (the tag, with
the ``reasoning`` its builder was called with, and how that tag begins; or the JSON Schema it
uses instead), where its reasoning parser ended the reasoning (explicitly, on an end marker whose
text is not content; implicitly, on a tool-call start that is), and what its scheduler masked
while the model reasoned (0.34.0's ``_masked_reasoning_ends``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.engine.stack_pins import ServeFlags
from app.engine.stepper.refusal import spell
from app.engine.tokens import Tokens

__all__ = ["stack_cause", "tag_starts"]

_LISTED = 6


def tag_starts(fmt: Any) -> list[str]:
    """The strings a structural tag's format can begin with (empty: free text or JSON)."""
    if not isinstance(fmt, dict):
        return []
    kind = fmt.get("type")
    if kind == "structural_tag":
        return tag_starts(fmt.get("format"))
    if kind == "tag":
        begin = fmt.get("begin")
        return [begin] if isinstance(begin, str) and begin else tag_starts(fmt.get("content"))
    if kind == "const_string":
        return [str(fmt.get("value", ""))]
    if kind == "sequence":
        return tag_starts((fmt.get("elements") or [None])[0])
    if kind in ("or", "tags_with_separator"):
        found: list[str] = []
        for element in fmt.get("elements") or fmt.get("tags") or []:
            found += [s for s in tag_starts(element) if s not in found]
        return found
    if kind == "triggered_tags":
        return [str(t) for t in fmt.get("triggers") or []]
    if kind in ("optional", "star", "plus", "repeat"):
        return tag_starts(fmt.get("content"))
    return []


def _marker(start: str) -> str:
    """A tag's opening up to what follows its marker (``<tool_call>`` of
    ``<tool_call>\\n{"name": ...``)."""
    cut = [i for i in (start.find("\n"), start.find("{")) if i > 0]
    return start[: min(cut)] if cut else start


def _show(texts: Sequence[str]) -> str:
    shown = ", ".join(json.dumps(t, ensure_ascii=False) for t in texts[:_LISTED])
    return shown + (f" (and {len(texts) - _LISTED} more)" if len(texts) > _LISTED else "")


def _constraint_sentence(head: str, build: dict[str, Any] | None) -> str:
    if build is None:
        return f"{head} masks with this grammar"
    tag = build.get("tag")
    if tag is None:
        constraint = build.get("constraint") or {}
        what = "a JSON Schema of the call list" if "json" in constraint else "no structural tag"
        return f"{head} built {what} for this request ({build.get('reason')})"
    calls = build.get("xgrammar_calls") or []
    called = calls[0]["kwargs"] if calls else {}
    said = f" with reasoning={called['reasoning']}" if "reasoning" in called else ""
    starts = list(dict.fromkeys(_marker(start) for start in tag_starts(tag)))
    begins = f"; it begins with {_show(starts)}" if starts else ""
    return f"{head} built this tag{said}{begins}"


def _reasoning_sentence(
    answer: dict[str, Any], tokens: Tokens, ids: list[int], head: str, serve: ServeFlags
) -> str:
    index = int(answer["refused_at"])
    end = answer.get("reasoning_end")
    parser = answer.get("reasoning_parser") or serve.reasoning_parser
    if end is not None:
        at = int(end["index"])
        marker = spell(tokens, ids[at])
        if end["implicit"]:
            return (
                f"its {parser} reasoning parser ended the reasoning implicitly on {marker!r} "
                f"(token {at}), which is content: the grammar starts with it"
            )
        after = b"".join(tokens.output_bytes(t) for t in ids[at + 1 : index + 1])
        text = after.decode("utf-8", errors="replace")
        return (
            f"its {parser} reasoning parser ended the reasoning on {marker!r} (token {at}), "
            f"which the grammar is not fed; the text after {marker!r} starts with {text!r}"
        )
    if not answer["steps"][index]["masked"]:
        return (
            f"while the model reasons, {head} masks {spell(tokens, ids[index])!r}: it would end "
            "the reasoning implicitly and the grammar cannot start with it "
            "(StructuredOutputManager._masked_reasoning_ends)"
        )
    if parser:
        return (
            f"its {parser} reasoning parser found the reasoning already closed (in the prompt, "
            "or enable_in_reasoning): the grammar applies from token 0"
        )
    return "no --reasoning-parser: the grammar applies from token 0"


def stack_cause(
    answer: dict[str, Any],
    *,
    tokens: Tokens,
    ids: list[int],
    versions: dict[str, str],
    serve: ServeFlags,
    allowed: Sequence[str] | None,
) -> str:
    """Why the stack refused the token at ``answer["refused_at"]``, in its own terms.

    Args:
        answer: the runner's replay answer (``vllm_masks.replay``).
        ids: the ids replayed.
        versions: the stack's versions (``vllm``).
        allowed: the spellings of the ids the refusing row allows, when few.
    """
    index = int(answer["refused_at"])
    step = answer["steps"][index]
    head = f"vLLM {versions.get('vllm', '?')}"
    parts = [
        _constraint_sentence(head, answer.get("build")),
        _reasoning_sentence(answer, tokens, ids, head, serve),
    ]
    token = spell(tokens, ids[index])
    if step["allowed"]:
        parts.append(f"the row allowed {token!r}, and the grammar's accept_tokens refused it")
    elif allowed is not None:
        parts.append(f"{token!r} is masked there; the row allows only {_show(list(allowed))}")
    else:
        parts.append(f"{token!r} is masked there ({step['allowed_count']} tokens allowed)")
    return "; ".join(parts)
