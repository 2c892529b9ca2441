"""Snippets for serving stacks: one HTTP request each, as a Python program and as curl."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.spec import GrammarKind
from app.export.escape import Code, identifier, one_line, py, sh, sh_json
from app.export.http import (
    SGLANG_URL,
    VLLM_URL,
    HttpCall,
    openai_call,
    sglang_call,
    sglang_openai_call,
    tools_call,
    vllm_call,
)
from app.export.model import Model, with_model
from app.export.notes import (
    options_line,
    pydantic_notes,
    sampling_notes,
    sglang_notes,
    vllm_notes,
)
from app.export.options import (
    SGLANG_VERSION,
    VLLM_VERSION,
    reach_openai,
    reach_sglang,
    reach_vllm,
)
from app.export.render import render
from app.export.request import ExportRequest
from app.export.snippet import Snippet, constants, header, missing_options
from app.export.tools import sglang_parser, vllm_serve

__all__ = [
    "Plan",
    "curl",
    "openai_plan",
    "python",
    "sglang_openai_plan",
    "sglang_plan",
    "vllm_plan",
]


@dataclass(frozen=True)
class Plan:
    """One stack's request, with the notes and the missing options its snippets comment on.

    Attributes:
        title: the stack, in words.
        call: the request.
        notes: comment lines (versions, server flags, what a seed means there).
        missing: what the stack cannot express, one sentence each.
        sdk: whether the Python form uses the OpenAI SDK (else requests).
        parse_pydantic: whether the Python form hands the Pydantic model to the SDK's parse.
    """

    title: str
    call: HttpCall
    notes: list[str]
    missing: list[str]
    sdk: bool = True
    parse_pydantic: bool = False


def _no_tag(req: ExportRequest) -> list[str]:
    """A tools source whose builder built no tag: nothing constrains the output."""
    if req.tools is None or req.tag is not None:
        return []
    why = f" ({one_line(req.tools.reason)})" if req.tools.reason else ""
    return [f"no structural tag: the builder built none{why}, so nothing is constrained"]


def _raw_tag_note(req: ExportRequest) -> list[str]:
    if req.tools is None:
        return []
    return [
        "The tools source's tag is sent raw, as Maskscope built it: the server applies that "
        "tag, and no tool parser turns the calls it writes into tool_calls."
    ]


def vllm_tools_command(req: ExportRequest) -> str:
    """The ``vllm serve`` command line a tools request needs (environment first)."""
    assert req.tools is not None
    serve = vllm_serve(req.tools)
    env = [f"{name}={value}" for name, value in serve.env]
    words = [*env, "vllm", "serve", req.model, *serve.flags]
    return one_line(" ".join(sh(word) if i >= len(env) else word for i, word in enumerate(words)))


def _vllm_tools_plan(req: ExportRequest) -> Plan:
    """vLLM's Chat Completions with the tools: vLLM builds the tag itself, as Maskscope did."""
    assert req.tools is not None
    serve = vllm_serve(req.tools, importlib.metadata.version("xgrammar"))
    notes = [
        f"vLLM {VLLM_VERSION}: Chat Completions with tools; the vllm builder's parser "
        f"{one_line(req.tools.request.format)} builds the structural tag.",
        "Serve the model with:\n$ " + vllm_tools_command(req),
        *serve.notes,
        *sampling_notes(req, "vLLM", "vLLM draws with its own generator."),
    ]
    missing = list(serve.missing)
    if req.raw_prompt is not None:
        missing.append("raw_prompt: tools need the chat API; the raw prompt is a user message")
    return Plan("vLLM, Chat Completions with tools", tools_call(req, VLLM_URL), notes, missing)


def vllm_plan(req: ExportRequest, *, legacy: bool = False) -> Plan:
    """vLLM's OpenAI-compatible server (``structured_outputs``, or ``guided_*`` when legacy)."""
    if req.tools is not None and req.tools.request.builder == "vllm" and not legacy:
        return _vllm_tools_plan(req)
    reach, missing = missing_options(req, reach_vllm, f"vLLM {VLLM_VERSION}")
    missing += _no_tag(req)
    notes = [
        options_line(req),
        *pydantic_notes(req),
        *vllm_notes(req, reach, legacy=legacy),
        *_raw_tag_note(req),
        *sampling_notes(req, "vLLM", "vLLM draws with its own generator."),
    ]
    if legacy and req.tools is not None:
        missing.append("the tools: this legacy request does not send them (the vllm target does)")
    if req.legacy_tag is not None and not legacy:
        notes.append(
            "The tag was given in its legacy form and is sent converted, as Maskscope compiled "
            "it: vLLM's xgrammar backend takes either form, its guidance backend only the "
            "legacy one (send the tag as given there; pick the engine llguidance in Maskscope "
            "to see that mask)."
        )
    if legacy and req.tag is not None:
        missing.append(
            "the structural tag: the guided_* fields have none (vLLM took a tag as "
            "response_format), so this request is not constrained"
        )
    title = "vLLM, " + ("legacy guided_* fields" if legacy else "structured_outputs")
    return Plan(title, vllm_call(req, legacy=legacy), notes, missing)


def _sglang_notes(req: ExportRequest) -> tuple[list[str], list[str]]:
    reach, missing = missing_options(req, reach_sglang, f"SGLang {SGLANG_VERSION}")
    seed = "it honours the seed only when started with --enable-deterministic-inference."
    return [
        options_line(req),
        *pydantic_notes(req),
        *sglang_notes(req, reach),
        *_raw_tag_note(req),
        *sampling_notes(req, "SGLang", seed),
    ], [*missing, *_no_tag(req)]


def sglang_plan(req: ExportRequest) -> Plan:
    """SGLang's native ``/generate`` with the prompt as the chat template rendered it."""
    notes, missing = _sglang_notes(req)
    if req.raw_prompt is None and req.prompt_text is None and req.messages:
        missing.append(
            "the prompt: /generate takes text, and this model's tokenizer has no chat template "
            "here to render the messages with (the SGLang OpenAI API tab sends the messages)"
        )
    elif req.raw_prompt is None:
        notes.append("/generate takes text: the prompt below is the chat template's rendering.")
    return Plan("SGLang, native /generate", sglang_call(req), notes, missing, sdk=False)


def _sglang_tools_plan(req: ExportRequest, parser: str, why: str) -> Plan:
    """SGLang's Chat Completions with the tools and the parser that builds xgrammar's tag."""
    launch = ["python -m sglang.launch_server --model-path", sh(req.model), "--tool-call-parser"]
    seed = "it honours the seed only when started with --enable-deterministic-inference."
    notes = [
        f"SGLang {SGLANG_VERSION}: Chat Completions with tools.",
        "Serve the model with:\n$ " + one_line(" ".join([*launch, sh(parser)])),
        why,
        *sampling_notes(req, "SGLang", seed),
    ]
    missing = []
    if req.tools is not None and req.tools.request.reasoning_parser:
        missing.append(
            "reasoning_parser: it names a vLLM reasoning parser; SGLang's --reasoning-parser "
            "names differ, so none is set"
        )
    if req.raw_prompt is not None:
        missing.append("raw_prompt: tools need the chat API; the raw prompt is a user message")
    call = tools_call(req, SGLANG_URL + "/v1")
    return Plan("SGLang, Chat Completions with tools", call, notes, missing)


def sglang_openai_plan(req: ExportRequest) -> Plan:
    """SGLang's OpenAI-compatible API."""
    if req.tools is not None:
        parser, why = sglang_parser(req.tools)
        if parser is not None:
            return _sglang_tools_plan(req, parser, why)
    notes, missing = _sglang_notes(req)
    if req.tools is not None:
        notes.append(why[0].upper() + why[1:] + ".")
    call = sglang_openai_call(req)
    if req.tag is not None and "response_format" not in call.body:
        missing.append(
            "the structural tag: SGLang's /v1/completions takes none (only chat's "
            "response_format does), so this request is not constrained"
        )
    return Plan("SGLang, OpenAI-compatible API", call, notes, missing)


def openai_plan(req: ExportRequest) -> Plan:
    """OpenAI's strict structured outputs."""
    _, missing = missing_options(req, reach_openai, "OpenAI")
    notes = [
        options_line(req),
        *pydantic_notes(req),
        f"OpenAI serves its own models, not {req.model}: the tokens will differ. Strict mode "
        "refuses a schema unless every object has additionalProperties: false and lists every "
        "property in required (the Doctor's openai_strict row checks it).",
    ]
    if req.sampling.greedy:
        notes.append("temperature=0 is not exactly greedy decoding at OpenAI.")
    if not req.is_json:
        missing.append(
            f"the {req.kind.value}: OpenAI's structured outputs take a JSON Schema "
            "only, so this request is not constrained"
        )
    if req.tools is not None:
        missing.append(
            "the tools: this request does not send them (OpenAI writes calls in its own "
            "format, which the tag Maskscope built does not describe)"
        )
    if req.raw_prompt is not None:
        missing.append(
            "raw_prompt: OpenAI applies its own chat template; the raw prompt is sent "
            "as a user message"
        )
    if req.pydantic is not None:
        notes.append(
            "The Python form gives the Pydantic model to the SDK's parse helper, which sends its "
            "own strict version of the schema; the curl form sends the schema Maskscope compiled."
        )
    notes += sampling_notes(req, "OpenAI", "OpenAI's seed is best effort.")
    title = "OpenAI, strict structured outputs"
    return Plan(title, openai_call(req), notes, missing, parse_pydantic=req.pydantic is not None)


def _names(req: ExportRequest, call: HttpCall) -> dict[int, Code]:
    names: dict[int, Code] = {}
    if "messages" in call.body:
        names[id(call.body["messages"])] = Code("MESSAGES")
    if req.is_json:
        names[id(req.schema)] = Code("SCHEMA")
        if call.schema_text is not None:
            names[id(call.schema_text)] = Code("json.dumps(SCHEMA)")
    elif req.kind is GrammarKind.STRUCTURAL_TAG:
        if call.schema_text is not None:
            names[id(call.schema_text)] = Code("json.dumps(TAG)")
        if "response_format" in call.body and call.body["response_format"] == req.tag:
            names[id(call.body["response_format"])] = Code("TAG")
    elif req.source:
        names[id(req.source)] = Code("GRAMMAR" if req.kind.value == "ebnf" else "REGEX")
    return names


def _prompt_constants(call: HttpCall) -> list[tuple[Code, Code]]:
    if "messages" in call.body:
        return [(Code("MESSAGES"), py(call.body["messages"]))]
    return []


def python(req: ExportRequest, plan: Plan, target: str) -> Snippet:
    """The plan as a Python program: the OpenAI SDK, or requests for SGLang's native API."""
    code = _sdk_program(req, plan) if plan.sdk else _generate_program(req, plan)
    return Snippet(target, "python", code, tuple(plan.missing))


def _generate_program(req: ExportRequest, plan: Plan) -> str:
    call = plan.call
    names = _names(req, call)
    consts = constants(req)
    prompt = call.body["text"]
    if prompt:
        names[id(prompt)] = Code("PROMPT")
        consts.append((Code("PROMPT"), py(prompt)))
    return render(
        "sglang_generate.py.j2",
        notes=header(plan.title, plan.notes, plan.missing),
        constants=consts,
        url=py(call.url),
        body=py(call.body, 4, names),
        uses_json=call.schema_text is not None,
    )


def _sdk_program(req: ExportRequest, plan: Plan) -> str:
    if not plan.parse_pydantic:
        return _sdk_code(req, plan, None, [])
    return with_model(req, lambda model, notes: _sdk_code(req, plan, model, notes))


def _sdk_code(req: ExportRequest, plan: Plan, pydantic: Model | None, extra: list[str]) -> str:
    """The OpenAI SDK program; it hands ``pydantic``'s root model to the parse helper if given."""
    call = plan.call
    parse = pydantic.root if pydantic else None
    chat = "messages" in call.body
    if chat:
        method = "chat.completions.parse" if parse else "chat.completions.create"
        output = "message.parsed" if parse else _chat_output(call)
    else:
        method, output = "completions.create", "text"
    client = "" if call.bearer_env else f'base_url={py(call.base_url)}, api_key="EMPTY"'
    kwargs = _sdk_kwargs(call, _names(req, call), parse_root=parse)
    consts = [*constants(req, with_schema=parse is None), *_prompt_constants(call)]
    return render(
        "openai_sdk.py.j2",
        notes=header(plan.title, [*plan.notes, *extra], plan.missing),
        pydantic=pydantic.source if pydantic else None,
        constants=_used(consts, kwargs),
        client=Code(client),
        method=Code(method),
        kwargs=kwargs,
        output=Code("completion.choices[0]." + output),
        uses_json=call.schema_text is not None,
    )


def _chat_output(call: HttpCall) -> str:
    """What a chat answer holds: the tool calls when tools are sent (``content`` is None for a
    call, issue 45, B8), the text when ``tool_choice`` leaves the model free to answer."""
    if "tools" not in call.body:
        return "message.content"
    if call.body.get("tool_choice") in ("auto", None):
        return "message.tool_calls or completion.choices[0].message.content"
    return "message.tool_calls"


def _used(
    consts: list[tuple[Code, Code]], kwargs: list[tuple[Code, Code]]
) -> list[tuple[Code, Code]]:
    """The constants the call names (a tools request sends the tools, never the built tag)."""
    text = "\n".join(str(value) for _, value in kwargs)
    return [(name, value) for name, value in consts if re.search(rf"\b{name}\b", text)]


def _sdk_kwargs(
    call: HttpCall, names: dict[int, Code], *, parse_root: Code | None
) -> list[tuple[Code, Code]]:
    kwargs: list[tuple[Code, Code]] = []
    for key, value in call.body.items():
        if key in call.extra:
            continue
        if key == "response_format" and parse_root is not None:
            kwargs.append((identifier(key), parse_root))
            continue
        kwargs.append((identifier(key), py(value, 4, names)))
    extra: dict[str, Any] = {key: call.body[key] for key in call.extra}
    if extra:
        kwargs.append((Code("extra_body"), py(extra, 4, names)))
    return kwargs


def curl(plan: Plan, target: str) -> Snippet:
    """The plan as one curl command."""
    call = plan.call
    # Double quotes: the shell expands the key's variable (the name is ours, not user input).
    headers = [Code(f'"Authorization: Bearer ${call.bearer_env}"')] if call.bearer_env else []
    notes = header(plan.title, plan.notes, plan.missing)
    code = render(
        "curl.sh.j2", notes=notes, url=sh(call.url), headers=headers, body=sh_json(call.body)
    )
    return Snippet(target, "bash", code, tuple(plan.missing))
