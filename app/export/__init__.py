"""Code export: the exact request, for each serving stack, that reproduces what Maskscope showed.

Engine-free: it takes the effective options, the schema, the prompt and sampling, and writes
snippets from templates, every value escaped for its language. Nothing here runs a model.
"""

from __future__ import annotations

from collections.abc import Callable

from app.export.local import llguidance_snippet, xgrammar_snippet
from app.export.remote import (
    Plan,
    curl,
    openai_plan,
    python,
    sglang_openai_plan,
    sglang_plan,
    vllm_plan,
)
from app.export.request import ExportRequest, Message, PydanticSource, Sampling
from app.export.snippet import Snippet, refused

__all__ = ["TARGETS", "ExportRequest", "Message", "PydanticSource", "Sampling", "Snippet", "export"]


def _legacy(req: ExportRequest) -> Plan:
    return vllm_plan(req, legacy=True)


_PLANS: dict[str, Callable[[ExportRequest], Plan]] = {
    "vllm": vllm_plan,
    "vllm_legacy": _legacy,
    "sglang": sglang_plan,
    "sglang_openai": sglang_openai_plan,
    "openai": openai_plan,
}
_CURL = {"curl_vllm": "vllm", "curl_sglang": "sglang", "curl_openai": "openai"}
_LOCAL = {"xgrammar": xgrammar_snippet, "llguidance": llguidance_snippet}

#: Every target, in the order the page shows them.
TARGETS: tuple[str, ...] = (*_PLANS, *_LOCAL, *_CURL)


#: The serving stack each remote target sends to, as the Doctor's rows name them.
_STACKS = {
    "sglang": "sglang", "sglang_openai": "sglang", "curl_sglang": "sglang",
    "openai": "openai", "curl_openai": "openai",
}  # fmt: skip
_STACK_NAMES = {"sglang": "SGLang", "openai": "OpenAI"}


def export(req: ExportRequest, target: str) -> Snippet:
    """The snippet for ``target`` (one of :data:`TARGETS`); for a stack whose Doctor row
    refuses the schema, that row's message instead of a request (issue 45, B7).

    Raises:
        KeyError: an unknown target (the web layer validates it first).
    """
    if target not in TARGETS:
        raise KeyError(target)
    stack = _STACKS.get(target, "")
    message = req.refusal(stack)
    if message is not None:
        return refused(target, _STACK_NAMES[stack], message)
    if target in _LOCAL:
        return _LOCAL[target](req)
    if target in _CURL:
        return curl(_PLANS[_CURL[target]](req), target)
    return python(req, _PLANS[target](req), target)
