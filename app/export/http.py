"""The HTTP request each serving stack takes: URL, body and headers, as data.

The Python snippet and the curl command of a stack are both rendered from one :class:`HttpCall`,
so they send the same body. Field names read from vLLM 0.32.0
(``vllm/entrypoints/openai/chat_completion/protocol.py``, ``StructuredOutputsParams`` in
``vllm/sampling_params.py``), SGLang 0.5.23 (``sglang/srt/sampling/sampling_params.py``,
``sglang/srt/entrypoints/openai/protocol.py``) and OpenAI's Chat Completions API.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.engine.grammar import GrammarKind
from app.export.request import ExportRequest

__all__ = ["OPENAI_MODEL", "HttpCall", "openai_call", "sglang_call", "sglang_openai_call",
           "vllm_call"]  # fmt: skip

VLLM_URL = "http://localhost:8000/v1"
SGLANG_URL = "http://localhost:30000"
OPENAI_URL = "https://api.openai.com/v1"
#: An OpenAI model with strict structured outputs (Maskscope's own model is not served there).
OPENAI_MODEL = "gpt-4o-mini"

# vLLM's StructuredOutputsParams field, and the legacy top-level field, by grammar kind.
_VLLM_FIELD = {GrammarKind.JSON_SCHEMA: "json", GrammarKind.EBNF: "grammar",
               GrammarKind.REGEX: "regex"}  # fmt: skip
_SGLANG_FIELD = {GrammarKind.JSON_SCHEMA: "json_schema", GrammarKind.EBNF: "ebnf",
                 GrammarKind.REGEX: "regex"}  # fmt: skip


@dataclass(frozen=True)
class HttpCall:
    """One request: where it goes and what it carries.

    Attributes:
        base_url: the server's base URL (``.../v1`` for OpenAI-compatible APIs).
        path: the route under it.
        body: the JSON body. Nested objects the snippets name (the schema, the messages) are the
            request's own objects, so a snippet can write ``SCHEMA`` in their place.
        extra: the body fields an OpenAI SDK call passes in ``extra_body`` (unknown to the SDK).
        constraint: the body field that carries the grammar, if any.
        bearer_env: the environment variable holding the API key, when the server needs one.
    """

    base_url: str
    path: str
    body: dict[str, Any]
    extra: tuple[str, ...] = ()
    constraint: str | None = None
    bearer_env: str | None = None
    grammar: Any = field(default=None, compare=False)

    @property
    def url(self) -> str:
        """The full URL."""
        return self.base_url + self.path


def grammar_value(req: ExportRequest) -> Any:
    """The schema object for JSON kinds, else the grammar or regex text."""
    return req.schema if req.is_json else req.source


def _openai_compatible(req: ExportRequest, model: str, *, max_key: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if req.raw_prompt is not None and max_key == "max_tokens":
        body["prompt"] = req.raw_prompt
    else:
        body["messages"] = req.chat() if req.raw_prompt is None else _raw_as_user(req)
    body[max_key] = req.max_tokens
    body["temperature"] = req.sampling.temperature
    if not req.sampling.greedy:
        body["top_p"] = req.sampling.top_p
        if req.sampling.seed is not None:
            body["seed"] = req.sampling.seed
    return body


def _raw_as_user(req: ExportRequest) -> list[dict[str, str]]:
    return [{"role": "user", "content": req.raw_prompt or ""}]


def _path(body: dict[str, Any]) -> str:
    return "/completions" if "prompt" in body else "/chat/completions"


def vllm_call(req: ExportRequest, *, legacy: bool = False) -> HttpCall:
    """vLLM's OpenAI-compatible API: ``structured_outputs``, or the removed ``guided_*`` fields."""
    body = _openai_compatible(req, req.model, max_key="max_tokens")
    grammar = grammar_value(req)
    if legacy:
        name = {"json": "guided_json", "grammar": "guided_grammar", "regex": "guided_regex"}[
            _VLLM_FIELD[req.kind]
        ]
        body[name] = grammar
    else:
        name = "structured_outputs"
        body[name] = {_VLLM_FIELD[req.kind]: grammar}
    return HttpCall(VLLM_URL, _path(body), body, (name,), name, grammar=grammar)


def sglang_call(req: ExportRequest) -> HttpCall:
    """SGLang's native ``/generate``: the rendered prompt and ``sampling_params``."""
    params: dict[str, Any] = {}
    name = _SGLANG_FIELD[req.kind]
    # SGLang takes the schema as a string here; json.dumps is what the Python snippet writes.
    params[name] = json.dumps(req.schema) if req.is_json else req.source
    params["max_new_tokens"] = req.max_tokens
    params["temperature"] = req.sampling.temperature
    if not req.sampling.greedy:
        params["top_p"] = req.sampling.top_p
        if req.sampling.seed is not None:
            params["sampling_seed"] = req.sampling.seed
    text = req.raw_prompt if req.raw_prompt is not None else req.prompt_text or ""
    body = {"text": text, "sampling_params": params}
    return HttpCall(SGLANG_URL, "/generate", body, constraint=name, grammar=params[name])


def sglang_openai_call(req: ExportRequest) -> HttpCall:
    """SGLang's OpenAI-compatible API: ``response_format`` for schemas, ``ebnf`` / ``regex``."""
    body = _openai_compatible(req, req.model, max_key="max_tokens")
    if "prompt" in body:  # /v1/completions takes the schema as a string field
        name = _SGLANG_FIELD[req.kind]
        body[name] = json.dumps(req.schema) if req.is_json else req.source
        return HttpCall(SGLANG_URL + "/v1", "/completions", body, (name,), name, grammar=body[name])
    if req.is_json:
        body["response_format"] = _response_format(req)
        return HttpCall(SGLANG_URL + "/v1", _path(body), body, (), "response_format", grammar=req.schema)
    name = _SGLANG_FIELD[req.kind]
    body[name] = req.source
    return HttpCall(SGLANG_URL + "/v1", _path(body), body, (name,), name, grammar=req.source)


def openai_call(req: ExportRequest) -> HttpCall:
    """OpenAI's Chat Completions in strict mode (JSON Schema only)."""
    body = _openai_compatible(req, OPENAI_MODEL, max_key="max_completion_tokens")
    if not req.is_json:
        return HttpCall(OPENAI_URL, "/chat/completions", body, bearer_env="OPENAI_API_KEY")
    body["response_format"] = _response_format(req)
    return HttpCall(OPENAI_URL, "/chat/completions", body, (), "response_format",
                    "OPENAI_API_KEY", grammar=req.schema)  # fmt: skip


def schema_name(schema: Any) -> str:
    """A ``json_schema.name`` (``^[a-zA-Z0-9_-]{1,64}$``) from the schema's title."""
    title = schema.get("title") if isinstance(schema, dict) else None
    name = re.sub(r"[^a-zA-Z0-9_-]+", "_", str(title or "")).strip("_")[:64]
    return name or "response"


def _response_format(req: ExportRequest) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": schema_name(req.schema), "schema": req.schema, "strict": True},
    }
