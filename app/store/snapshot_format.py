"""The rule that keeps permalink ids stable as the snapshot format grows.

A snapshot's id hashes its canonical content. The first format (version 1) wrote every field
with its default filled in; those fields (:data:`V1_FIELDS`) are still written that way, so the
ids of the snapshots made then do not change. Every field added since is left out while it
holds its default value: adding a field to the format never changes the id of content that does
not use it.

Paths name fields from the snapshot's root, joined by dots, with ``[]`` for the items of a list
(``request.messages[].role``).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

__all__ = ["V1_FIELDS", "field_defaults", "without_defaults"]

#: Every field of the version-1 snapshot format: always written, defaults filled in.
V1_FIELDS = frozenset(
    {
        "version",
        "request",
        "request.grammar",
        "request.grammar.kind",
        "request.grammar.source",
        "request.grammar.options",
        *(
            f"request.grammar.options.{name}"
            for name in (
                "preset",
                "any_whitespace",
                "strict_mode",
                "indent",
                "separators",
                "max_whitespace_cnt",
                "root_model",
            )
        ),
        "request.messages",
        "request.messages[].role",
        "request.messages[].content",
        "request.raw_prompt",
        "request.schema_in_prompt",
        "request.sampling",
        "request.sampling.temperature",
        "request.sampling.top_p",
        "request.sampling.seed",
        "request.max_tokens",
        "request.top_k",
        "actions",
        "actions[].op",
        "actions[].n",
        "actions[].token_id",
        "model",
        "model.model_id",
        "model.weights_sha256",
        "versions",
        "versions.xgrammar",
        "versions.transformers",
        "versions.torch",
    }
)


def _model_in(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model an annotation holds (in ``X | None``, ``list[X]``, ``Annotated``), and whether
    it is a list of them."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if origin is list:
        inner = _model_in(typing.get_args(annotation)[0])
        return (inner[0], True) if inner else None
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            if (inner := _model_in(arg)) is not None:
                return inner
    return None


def field_defaults(model: type[BaseModel], *, at: str) -> dict[str, Any]:
    """The default value (as JSON) of every field of ``model`` that has one, and of the models
    it holds, by path below ``at``."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        path = f"{at}.{name}"
        if not field.is_required():
            out[path] = to_jsonable_python(field.get_default(call_default_factory=True))
        inner = _model_in(field.annotation)
        if inner is not None:
            out |= field_defaults(inner[0], at=f"{path}[]" if inner[1] else path)
    return out


def _prune(value: Any, path: str, defaults: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if child not in V1_FIELDS and child in defaults and item == defaults[child]:
                continue
            out[key] = _prune(item, child, defaults)
        return out
    if isinstance(value, list):
        return [_prune(item, f"{path}[]", defaults) for item in value]
    return value


def without_defaults(content: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``content`` without the fields outside :data:`V1_FIELDS` that hold their default.

    Args:
        content: a snapshot, every field written.
        defaults: each field's default value, by path (see :func:`field_defaults`).
    """
    pruned: dict[str, Any] = _prune(content, "", defaults)
    return pruned
