"""A replay under a vLLM stack: the rows vLLM's own scheduler masks each step with, in its runner.

Imported by ``vllm_runner.py`` inside the stack's environment (standard library and vLLM only).
A replay builds what ``vllm serve`` builds for one request, with vLLM's own classes:

- ``StructuredOutputsConfig`` from the serve flags (``--structured-outputs-config``: backend,
  ``disable_any_whitespace``, ``enable_in_reasoning``; ``--reasoning-parser``);
- ``SamplingParams._validate_structured_outputs``, which resolves the backend (``auto``);
- a ``Request`` (the prompt's ids, the sampling parameters, the chat template kwargs its
  reasoning parser is built with), and the engine's ``StructuredOutputManager``, whose
  ``grammar_init`` builds ``XgrammarBackend`` or ``GuidanceBackend`` on the tokenizer and
  compiles the grammar (synchronously: no thread pool);
- then, per token, as the scheduler does: ``grammar_bitmask`` (the row the GPU applies:
  the grammar's ``fill_bitmask``, or what the manager masks itself while the request reasons,
  e.g. 0.34.0's ``_masked_reasoning_ends``), the token appended to the request, and
  ``accept_tokens`` (which finds the reasoning's end, explicit or implicit, and feeds the
  grammar its ``accept_tokens``; the bitmask fill's own ``rollback`` runs inside).

Only the configuration objects that describe the *model* (its vocabulary size, its type) are
plain namespaces: a tokenizer is all this process loads, never weights.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
from types import SimpleNamespace
from typing import Any

__all__ = ["forget", "replay", "unconstrained"]

#: The backends built (each holds its tokenizer's vocabulary twice), a few kept, oldest first.
_BACKENDS: dict[str, Any] = {}
_KEPT_BACKENDS = 3


def forget() -> None:
    """Drop the backends kept (the runner gives their memory back when a request runs out)."""
    _BACKENDS.clear()


def _model_config(vocab_size: int, tokenizer_path: str) -> Any:
    model_type = ""
    try:
        with open(os.path.join(tokenizer_path, "config.json"), encoding="utf-8") as file:
            model_type = str(json.load(file).get("model_type") or "")
    except (OSError, ValueError):
        pass
    return SimpleNamespace(
        is_diffusion=False,
        skip_tokenizer_init=True,  # the manager loads no tokenizer of its own: it is given ours
        get_vocab_size=lambda: vocab_size,
        max_logprobs=20,
        max_model_len=1 << 20,
        hf_config=SimpleNamespace(model_type=model_type),
    )


def _vllm_config(message: dict[str, Any], model_config: Any) -> Any:
    from vllm.config import StructuredOutputsConfig

    serve = dict(message.get("structured_outputs_config") or {})
    if message.get("reasoning_parser"):
        serve["reasoning_parser"] = message["reasoning_parser"]
    return SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(**serve),
        model_config=model_config,
        speculative_config=None,
        num_speculative_tokens=0,
        scheduler_config=SimpleNamespace(max_num_seqs=1),
        # vLLM compiles synchronously under this backend (no thread pool: one request here)
        parallel_config=SimpleNamespace(distributed_executor_backend="external_launcher"),
    )


def _manager(message: dict[str, Any], tokenizer: Any, vllm_config: Any) -> Any:
    from vllm.reasoning import ReasoningParserManager
    from vllm.v1.structured_output import StructuredOutputManager

    manager = StructuredOutputManager(vllm_config)
    # What __init__ does when the tokenizer is loaded by the engine (skip_tokenizer_init=False).
    manager.tokenizer = tokenizer
    if message.get("reasoning_parser"):
        name = message["reasoning_parser"]
        manager.reasoner_cls = ReasoningParserManager.get_reasoning_parser(name)
    return manager


def _request(message: dict[str, Any], tokenizer: Any, vllm_config: Any) -> Any:
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request

    params = SamplingParams(
        structured_outputs=StructuredOutputsParams(**message["structured_outputs"]),
        max_tokens=max(1, len(message["token_ids"]) + 1),
        stop_token_ids=list(message.get("stop_token_ids") or []),
    )
    params._validate_structured_outputs(
        vllm_config.model_config, vllm_config.structured_outputs_config, tokenizer
    )
    return Request(
        request_id="maskscope",
        prompt_token_ids=list(message.get("prompt_token_ids") or []),
        sampling_params=params,
        pooling_params=None,
        reasoning_parser_kwargs={"chat_template_kwargs": message.get("chat_template_kwargs") or {}}
        if message.get("reasoning_parser")
        else None,
    )


def _row_bits(row: Any, vocab_size: int) -> tuple[int, bytes]:
    import numpy as np

    words = np.asarray(row, dtype=np.int32).view(np.uint32)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size]
    return int(bits.sum()), words.tobytes()


def _allowed(row: Any, token_id: int) -> bool:
    return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)


def _library(request: Any) -> dict[str, str]:
    """The library that fills the rows: the backend vLLM resolved for the request."""
    name = str(request.sampling_params.structured_outputs._backend or "")
    dist = {"guidance": "llguidance"}.get(name, name)
    try:
        version = importlib.metadata.version(dist)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        version = ""
    return {"library": dist, "version": version}


def _grammar_text(grammar: Any, request: Any) -> str:
    """The grammar the backend masks with, as that release's library prints it (xgrammar's EBNF
    after its own rewriting), else the spec vLLM handed the backend (guidance)."""
    compiled = getattr(grammar, "ctx", None)
    if compiled is not None and hasattr(compiled, "grammar"):
        return str(compiled.grammar)
    key = request.structured_output_request.structured_output_key
    return str(key[1])


def replay(message: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """Walk ``message["token_ids"]`` through vLLM's scheduler-side masking, step by step.

    Returns:
        ``{"steps": [{"token_id", "allowed", "accepted", "allowed_count", "masked",
        "bitmask"?}], "refused_at", "terminated", "reasoning_end": {"index", "implicit"}|None,
        "masked_reasoning_ends": [int], "mask_by": {"library", "version"}, "grammar_text"}``.
        ``allowed``: the row lets the token through; ``accepted``: the grammar took it
        (``accept_tokens``); ``masked``: the row is the grammar's (not the reasoning phase's);
        ``grammar_text``: what the backend masks with. The walk stops at the first token the row
        blocks or the grammar refuses.
    """
    vocab_size = int(message["vocab_size"])
    model_config = _model_config(vocab_size, message["tokenizer"])
    vllm_config = _vllm_config(message, model_config)
    manager = _manager(message, tokenizer, vllm_config)
    request = _request(message, tokenizer, vllm_config)
    key = json.dumps(
        [
            message["tokenizer"],
            vocab_size,
            message.get("structured_outputs_config") or {},
            request.sampling_params.structured_outputs._backend,
        ]
    )
    # One backend per engine, as vLLM keeps it: built on the tokenizer once, then reused.
    if key in _BACKENDS:
        manager.backend = _BACKENDS[key]
        if hasattr(manager, "backend_name"):
            manager.backend_name = request.sampling_params.structured_outputs._backend
    manager.grammar_init(request)
    _BACKENDS[key] = manager.backend
    while len(_BACKENDS) > _KEPT_BACKENDS:
        _BACKENDS.pop(next(iter(_BACKENDS)))
    grammar = request.structured_output_request.grammar
    if isinstance(grammar, Exception):
        raise grammar
    keep = set(message.get("keep") or ())
    steps: list[dict[str, Any]] = []
    refused_at = None
    end = None
    for index, token_id in enumerate(message["token_ids"]):
        masked = manager._get_constraint_bounds(request, ()).constraint_start == 0
        row = manager.grammar_bitmask({request.request_id: request}, [request.request_id], {})[0]
        count, data = _row_bits(row, vocab_size)
        step: dict[str, Any] = {
            "token_id": token_id,
            "allowed": _allowed(row, token_id),
            "allowed_count": count,
            "masked": masked,
        }
        if index in keep or not step["allowed"]:
            step["bitmask"] = base64.b64encode(data).decode()
        steps.append(step)
        if not step["allowed"]:
            step["accepted"] = False
            refused_at = index
            break
        ended_before = bool(request.structured_output_request.reasoning_ended)
        bounds = None if ended_before else manager._get_constraint_bounds(request, [token_id])
        request.append_output_token_ids(token_id)
        step["accepted"] = bool(manager.accept_tokens(request, [token_id]))
        if not ended_before and request.structured_output_request.reasoning_ended:
            end = {"index": index, "implicit": bool(bounds and bounds.grammar_start == 0)}
        if not step["accepted"]:
            step["bitmask"] = base64.b64encode(data).decode()
            refused_at = index
            break
    structured = request.structured_output_request
    return {
        "steps": steps,
        "refused_at": refused_at,
        "terminated": bool(grammar.is_terminated()),
        "reasoning_end": end,
        "masked_reasoning_ends": list(getattr(structured, "masked_reasoning_end_ids", None) or ()),
        "mask_by": _library(request),
        "reasoning_parser": message.get("reasoning_parser"),
        "grammar_text": _grammar_text(grammar, request),
    }


def unconstrained(message: dict[str, Any], built: dict[str, Any]) -> dict[str, Any]:
    """A replay of a request vLLM derives no constraint for: no grammar, no row applied."""
    vocab_size = int(message["vocab_size"])
    steps = [
        {"token_id": t, "allowed": True, "accepted": True, "allowed_count": vocab_size,
         "masked": False}
        for t in message["token_ids"]
    ]  # fmt: skip
    return {
        "steps": steps,
        "refused_at": None,
        "terminated": False,
        "reasoning_end": None,
        "masked_reasoning_ends": [],
        "mask_by": {"library": "", "version": ""},
        "build": built,
    }
