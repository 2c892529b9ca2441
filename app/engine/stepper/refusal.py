"""The first refused token of a replay, explained: the state it was refused in, what the mask
allowed there, and for a structural tag, the cause in the tag's terms.

Every token is spelled as the model spells it: an added or special token by its name
(``</think>``, ``<tool_call>``), any other by its text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch

from app.engine.grammars.spec import CompileResult, GrammarKind
from app.engine.mask import bitmask_bytes
from app.engine.mask_summary import summarize_mask
from app.engine.masking import MaskingEngine
from app.engine.records import Refusal
from app.engine.tokens import Tokens

__all__ = ["explain_refusal", "spell", "tag_cause"]

#: The most characters of the accepted text quoted before the refusal.
_TAIL = 60


def _added(tokens: Tokens) -> dict[int, str]:
    decoder = getattr(tokens.tokenizer, "added_tokens_decoder", None) or {}
    return {int(i): str(t.content) for i, t in decoder.items()}


def _special_added(tokens: Tokens) -> frozenset[int]:
    decoder = getattr(tokens.tokenizer, "added_tokens_decoder", None) or {}
    return frozenset(int(i) for i, t in decoder.items() if t.special)


def spell(tokens: Tokens, token_id: int, added: dict[int, str] | None = None) -> str:
    """``token_id`` as the model spells it: an added or special token by name, else its text."""
    names = _added(tokens) if added is None else added
    name = names.get(token_id)
    return name if name is not None else tokens.text(token_id)


def explain_refusal(
    grammar: CompileResult,
    masking: MaskingEngine,
    tokens: Tokens,
    words: torch.Tensor,
    *,
    token_id: int,
    index: int,
    consumed: bytes,
) -> Refusal:
    """The refusal of ``token_id`` in the state ``masking`` is in (a refused token leaves it
    there), whose mask is ``words``.

    Args:
        consumed: the output bytes accepted before it.
    """
    added = _added(tokens)
    summary = summarize_mask(bitmask_bytes(words), tokens)
    listed = (
        tuple(spell(tokens, i, added) for i in summary.allowed_ids)
        if summary.allowed_ids is not None
        else None
    )
    text = consumed.decode("utf-8", errors="replace")
    token = spell(tokens, token_id, added)
    cause = None
    tag_json = _tag_json(grammar)
    if tag_json is not None:
        free = summary.allowed_ids is None
        cause = tag_cause(tag_json, token, text, masking.accepts_bytes, free_text=free)
    return Refusal(
        index=index,
        token_id=token_id,
        token=token,
        special=token_id in tokens.special_ids or token_id in _special_added(tokens),
        rules=tuple(masking.active_rules()),
        after=text[-_TAIL:],
        allowed=summary,
        allowed_tokens=listed,
        cause=cause,
    )


def _tag_json(grammar: CompileResult) -> str | None:
    """The structural tag a grammar masks with, as JSON: a pasted tag's source, or the tag a
    ``tools`` source's builder made (every refusal of a ``tools`` source has a cause)."""
    if grammar.spec.kind is GrammarKind.STRUCTURAL_TAG:
        return grammar.spec.source
    if grammar.tools is not None:
        from app.engine.grammars.tools.compile import tag_source

        return tag_source(grammar.tools)
    return None


def _markers(node: Any, markers: dict[str, str], excludes: dict[str, str]) -> None:
    """Collect the tag's literal strings (begins, ends, triggers, constants, separators) with
    their role, and the strings its free text excludes with the part that excludes them."""
    if isinstance(node, list):
        for item in node:
            _markers(item, markers, excludes)
        return
    if not isinstance(node, dict):
        return
    kind = str(node.get("type", ""))
    roles = {"begin": "the begin of a tag", "end": "the end of a tag",
             "triggers": "a trigger that starts a tag", "separator": "a separator",
             "value": "a constant string"}  # fmt: skip
    for key, role in roles.items():
        if key == "value" and kind != "const_string":
            continue
        values = node.get(key)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and value:
                markers.setdefault(value, role)
    for value in node.get("excludes") or ():
        if isinstance(value, str):
            excludes.setdefault(value, kind or "the tag")
    for key, value in node.items():
        if key not in roles and key != "excludes" and key != "json_schema":
            _markers(value, markers, excludes)


def _rest(marker: str, consumed: str) -> str:
    """What is left of ``marker`` when the text already ends with a part of it."""
    for size in range(len(marker) - 1, 0, -1):
        if consumed.endswith(marker[:size]):
            return marker[size:]
    return marker


def tag_cause(
    source: str,
    token: str,
    consumed: str,
    accepts: Callable[[bytes], bool],
    *,
    free_text: bool = False,
) -> str | None:
    """Why a structural tag refused ``token`` after ``consumed``, in the tag's terms: the last
    of its markers seen, whether the tag excludes the token, and which markers it takes here.

    Args:
        source: the tag's JSON.
        accepts: whether the grammar takes these bytes from the state of the refusal.
        free_text: the mask there allows too many tokens to list (free text): only the
            triggers are named, since the other markers would be taken as plain text.
    """
    try:
        tag = json.loads(source)
    except ValueError:
        return None
    markers: dict[str, str] = {}
    excludes: dict[str, str] = {}
    _markers(tag.get("format", tag) if isinstance(tag, dict) else tag, markers, excludes)
    seen = [(consumed.rfind(m) + len(m), m) for m in markers if m.strip() and m in consumed]
    last = max(seen)[1] if seen else None
    where = f"after {last!r} ({markers[last]})" if last else "before any of the tag's markers"
    parts = [f"{token!r} is refused {where}."]
    if token in excludes:
        parts.append(f"The tag's {excludes[token]} lists {token!r} in its excludes")
        parts[-1] += "." if token in markers else ", and no part of the tag begins or ends with it."
    elif token in markers:
        parts.append(f"{token!r} is {markers[token]}, which the tag does not take here.")
    roles = ("a trigger that starts a tag",) if free_text else tuple(set(markers.values()))
    allowed = [
        f"{m!r} ({role})"
        for m, role in markers.items()
        if role in roles and m.strip() and accepts(_rest(m, consumed).encode())
    ]
    if free_text:
        barred = ", ".join(repr(e) for e in excludes) or "nothing"
        parts.append(f"Here the tag takes free text without {barred}")
        parts[-1] += f"; {', '.join(allowed)} starts a tag." if allowed else "."
    elif allowed:
        parts.append("Here the tag takes " + ", ".join(allowed) + ".")
    else:
        parts.append("None of the tag's markers is allowed here.")
    return " ".join(parts)
