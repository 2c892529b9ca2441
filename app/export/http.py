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
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.spec import GrammarKind
from app.export.request import ExportRequest
from app.export.tools import tools_fields

__all__ = [
    "OPENAI_MODEL",
    "HttpCall",
    "openai_call",
    "sglang_call",
    "sglang_openai_call",
    "tools_call",
    "vllm_call",
]

VLLM_URL = "http://localhost:8000/v1"
SGLANG_URL = "http://localhost:30000"
OPENAI_URL = "https://api.openai.com/v1"
#: An OpenAI model with strict structured outputs (Maskscope's own model is not served there).
OPENAI_MODEL = "gpt-4o-mini"

# vLLM's StructuredOutputsParams field by grammar kind (the legacy field is guided_<it>).
_VLLM_FIELD = {
    GrammarKind.JSON_SCHEMA: "json",
    GrammarKind.EBNF: "grammar",
    GrammarKind.REGEX: "regex",
}
# SGLang's sampling_params field by grammar kind (a tag as a JSON string, like a schema).
_SGLANG_FIELD = {
    GrammarKind.JSON_SCHEMA: "json_schema",
    GrammarKind.EBNF: "ebnf",
    GrammarKind.REGEX: "regex",
    GrammarKind.STRUCTURAL_TAG: "structural_tag",
}


@dataclass(frozen=True)
class HttpCall:
    """One request: where it goes and what it carries.

    Attributes:
        base_url: the server's base URL (``.../v1`` for OpenAI-compatible APIs).
        path: the route under it.
        body: the JSON body. The schema, grammar and messages in it are the request's own
            objects, so that a Python snippet can write ``SCHEMA`` or ``MESSAGES`` in their place.
        extra: the body fields an OpenAI SDK call passes in ``extra_body`` (unknown to the SDK).
        bearer_env: the environment variable holding the API key, when the server needs one.
        schema_text: the schema as a JSON string, where the API takes it so (SGLang's
            ``json_schema``): a Python snippet writes ``json.dumps(SCHEMA)`` in its place.
    """

    base_url: str
    path: str
    body: dict[str, Any]
    extra: tuple[str, ...] = ()
    bearer_env: str | None = None
    schema_text: str | None = None

    @property
    def url(self) -> str:
        """The full URL."""
        return self.base_url + self.path


def _openai_compatible(req: ExportRequest, model: str, *, max_key: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if req.raw_prompt is None:
        body["messages"] = req.chat()
    elif max_key == "max_tokens":  # vLLM and SGLang: /v1/completions takes the raw text
        body["prompt"] = req.raw_prompt
    else:  # OpenAI has no raw completions with structured outputs: a user message
        body["messages"] = [{"role": "user", "content": req.raw_prompt}]
    body[max_key] = req.max_tokens
    body["temperature"] = req.sampling.temperature
    if not req.sampling.greedy:
        body["top_p"] = req.sampling.top_p
        if req.sampling.seed is not None:
            body["seed"] = req.sampling.seed
    return body


def _path(body: dict[str, Any]) -> str:
    return "/completions" if "prompt" in body else "/chat/completions"


def _grammar_text(req: ExportRequest) -> str:
    """The grammar as a string field takes it: SGLang's ``json_schema`` is a JSON string."""
    if req.tag is not None:
        return json.dumps(req.tag)
    return json.dumps(req.schema) if req.is_json else req.source


def tools_call(req: ExportRequest, base_url: str) -> HttpCall:
    """Chat Completions with the source's tools (a raw prompt goes as a user message: tools
    need the chat API)."""
    assert req.tools is not None
    body = _openai_compatible(req, req.model, max_key="max_tokens")
    if "prompt" in body:
        del body["prompt"]
        body = {"model": body.pop("model"), "messages": [
            {"role": "user", "content": req.raw_prompt}], **body}  # fmt: skip
    body.update(tools_fields(req.tools))
    return HttpCall(base_url, "/chat/completions", body)


def vllm_call(req: ExportRequest, *, legacy: bool = False) -> HttpCall:
    """vLLM's OpenAI-compatible API: ``structured_outputs``, or the removed ``guided_*`` fields."""
    body = _openai_compatible(req, req.model, max_key="max_tokens")
    if req.kind is GrammarKind.STRUCTURAL_TAG and req.tag is None:  # a tools source, no tag
        return HttpCall(VLLM_URL, _path(body), body)
    if req.tag is not None:  # StructuredOutputsParams.structural_tag: the tag as a JSON string
        if legacy:  # no guided_* field takes a tag: the plan says the request is unconstrained
            return HttpCall(VLLM_URL, _path(body), body)
        text = json.dumps(req.tag)
        body["structured_outputs"] = {"structural_tag": text}
        return HttpCall(VLLM_URL, _path(body), body, ("structured_outputs",), schema_text=text)
    grammar = req.schema if req.is_json else req.source
    field = _VLLM_FIELD[req.kind]
    if legacy:
        name = "guided_" + field
        body[name] = grammar
    else:
        name = "structured_outputs"
        body[name] = {field: grammar}
    return HttpCall(VLLM_URL, _path(body), body, (name,))


def sglang_call(req: ExportRequest) -> HttpCall:
    """SGLang's native ``/generate``: the rendered prompt and ``sampling_params``."""
    text = _grammar_text(req)
    params: dict[str, Any] = {_SGLANG_FIELD[req.kind]: text, "max_new_tokens": req.max_tokens}
    if req.kind is GrammarKind.STRUCTURAL_TAG and req.tag is None:  # a tools source, no tag
        del params[_SGLANG_FIELD[req.kind]]
    params["temperature"] = req.sampling.temperature
    if not req.sampling.greedy:
        params["top_p"] = req.sampling.top_p
        if req.sampling.seed is not None:
            params["sampling_seed"] = req.sampling.seed
    prompt = req.raw_prompt if req.raw_prompt is not None else req.prompt_text or ""
    body = {"text": prompt, "sampling_params": params}
    as_json = req.is_json or req.tag is not None
    return HttpCall(SGLANG_URL, "/generate", body, schema_text=text if as_json else None)


def sglang_openai_call(req: ExportRequest) -> HttpCall:
    """SGLang's OpenAI-compatible API: ``response_format`` for schemas, ``ebnf`` / ``regex``."""
    body = _openai_compatible(req, req.model, max_key="max_tokens")
    base = SGLANG_URL + "/v1"
    if req.kind is GrammarKind.STRUCTURAL_TAG and req.tag is None:  # a tools source, no tag
        return HttpCall(base, _path(body), body)
    if req.tag is not None:  # response_format {"type": "structural_tag", "format"}: chat only
        if "messages" in body:
            body["response_format"] = req.tag
        return HttpCall(base, _path(body), body)
    if req.is_json and "messages" in body:
        body["response_format"] = _response_format(req)
        return HttpCall(base, _path(body), body)
    name = _SGLANG_FIELD[req.kind]  # /v1/completions takes even a schema as a string field
    body[name] = text = _grammar_text(req)
    return HttpCall(base, _path(body), body, (name,), schema_text=text if req.is_json else None)


def openai_call(req: ExportRequest) -> HttpCall:
    """OpenAI's Chat Completions in strict mode (JSON Schema only)."""
    body = _openai_compatible(req, OPENAI_MODEL, max_key="max_completion_tokens")
    if req.is_json:
        body["response_format"] = _response_format(req)
    return HttpCall(OPENAI_URL, "/chat/completions", body, bearer_env="OPENAI_API_KEY")


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
