"""vLLM's own tool-call code, run in vLLM's virtualenv: JSON requests on stdin, answers on stdout.

Run as ``<.venv-vllm>/bin/python -I vllm_runner.py [--memory-mb N]``; it imports only the
standard library and vLLM (with the xgrammar vLLM pins), never Maskscope. ``--memory-mb`` caps
its data segment (``RLIMIT_DATA``, set before vLLM is imported: ``RLIMIT_AS`` would break torch's
imports, which reserve far more address space than they use). One JSON object a line each way.
The first line it writes is ``{"ready": true, "versions": {...}}``; then, for each request line
(each may carry ``"strict": str|None``, the value of ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` it is
answered under; null: unset, vLLM's default):

- ``{"op": "formats", "tokenizer": str}`` -> ``{"formats": [{"name", "builds_tag",
  "reasoning_end", "available", "reason"}]}``: every ``--tool-call-parser`` vLLM registers.
- ``{"op": "build", "tokenizer": str, "format": str, "tools": [...], "tool_choice": ...,
  "reasoning": str, "parallel_tool_calls": bool, "strict_level": str|None,
  "reasoning_parser": str|None, "response_format": dict|None}`` -> ``{"tag": dict|None,
  "reason": str|None, "reasoning_end": str|None, "reasoning_end_unavailable": str|None,
  "xgrammar_calls": [{"kwargs", "tag"}]}``.
- ``{"op": "serve_flags", "tokenizer": str}`` -> ``{"reasoning_parsers": [{"name",
  "reasoning_end", "reason"}], "strict_levels": [str]}``: every ``--reasoning-parser`` vLLM
  registers (its end marker on the tokenizer) and every ``--tool-strict-level``.
- ``{"op": "derive", "tokenizer": str, "body": dict, "serve": {"tool_call_parser"?,
  "reasoning_parser"?, "tool_strict_level"?}, "chat_template": str|None}`` -> ``{"prompt",
  "prompt_tokens", "constraint": {field: value}|None, "reasoning_end", "min_tokens",
  "stop_token_ids", "stop", ...}``: a pasted Chat Completions request as the server takes it.
- ``{"op": "encoders"}`` -> ``{"encoders": {mode: {"mode", "tokenizer", "encoder",
  "renderer"}}}``: the ``--tokenizer-mode`` values whose tokenizer renders chat with a Python
  prompt encoder instead of a Jinja template (DeepSeek V3.2 / V4 / V4.1, where the release has
  them), as its own registries map them.
- ``{"op": "render", "tokenizer": str, "messages": [...], "tools": [...]|None,
  "add_generation_prompt": bool, "chat_template_kwargs": dict, "chat_template": str|None,
  "tokenizer_mode": str|None}`` -> ``{"text", "prompt_tokens", "rendered_by"}``: the prompt the
  server renders, by the mode's encoder (its renderer's ``render_messages``), else by vLLM's
  chat renderer as ``derive`` renders.
- ``{"op": "replay", ...}`` -> ``vllm_masks.replay``'s answer, with ``compile_calls``: what the
  backend called its library with (``token_ids: []``: the compile alone, as ``check`` uses it).

An answer that failed is ``{"error": {"message", "type", "loc"}}`` (``type`` ``"memory"``: the
request needed more than the cap, even with the tokenizers forgotten). The request goes through
the path vLLM's OpenAI server takes: ``ParserManager.get_parser`` (which checks the parsers
against the tokenizer, as ``vllm serve`` does at start-up), the composed parser built on the
tokenizer, and its ``adjust_request`` (``_apply_structural_tag``, or a parser's override).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
from collections import OrderedDict
from typing import Any


def _option(argv: list[str], name: str) -> list[str]:
    """Every value given to ``name`` (``--path A --path B``)."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == name]


def _cap_memory(argv: list[str]) -> None:
    for value in _option(argv, "--memory-mb")[-1:]:
        cap = int(value) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))


_cap_memory(sys.argv)
# A stack layered over another environment (a release's wheel installed --no-deps into a
# directory of its own): its directories come first, before the environment's site-packages.
sys.path[:0] = _option(sys.argv, "--path")
# The replay module beside this script (appended: it must shadow nothing).
sys.path.append(os.path.dirname(os.path.abspath(__file__)))

# vLLM logs to stdout: the answers get a private copy of it, and stdout becomes stderr.
_ANSWERS = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)

# Every call vLLM makes into xgrammar's builtin tag builders, with its arguments, so that the
# server can ask its own xgrammar the same question (replaced before vLLM binds the name).
import xgrammar  # noqa: E402

_XGRAMMAR_CALLS: list[dict[str, Any]] = []
_original_get_model_structural_tag = xgrammar.get_model_structural_tag


def _recording_get_model_structural_tag(*args: Any, **kwargs: Any) -> Any:
    names = ("model", "tools", "tool_choice", "reasoning")
    call = dict(zip(names, args, strict=False)) | kwargs
    tag = _original_get_model_structural_tag(**call)
    _XGRAMMAR_CALLS.append({"kwargs": _jsonable(call), "tag": tag.model_dump(mode="json")})
    return tag


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


xgrammar.get_model_structural_tag = _recording_get_model_structural_tag

# vLLM reads VLLM_ENFORCE_STRICT_TOOL_CALLING lazily (``vllm.envs.__getattr__``), except in
# ``ToolParser.__init_subclass__``, which sets ``supports_required_and_named = False`` on each
# parser class with a structural-tag model when the class is created under strict calling. So
# that one process answers every setting, vLLM's own hook is run again on every parser class,
# under each request's setting (installed before any parser class exists; they load lazily).
from vllm.tool_parsers.abstract_tool_parser import ToolParser  # noqa: E402

_STRICT_ENV = "VLLM_ENFORCE_STRICT_TOOL_CALLING"
_ATTRIBUTE = "supports_required_and_named"
_ABSENT = object()
_vllm_init_subclass = ToolParser.__dict__["__init_subclass__"].__func__
#: Every parser class, with its own declared value of the attribute (before vLLM's hook).
_PARSER_CLASSES: dict[type, object] = {}


def _init_subclass(cls: type, /, **kwargs: Any) -> None:
    _PARSER_CLASSES[cls] = cls.__dict__.get(_ATTRIBUTE, _ABSENT)
    _vllm_init_subclass(cls, **kwargs)


ToolParser.__init_subclass__ = classmethod(_init_subclass)


def _apply_strict(setting: str | None) -> None:
    """Answer as a process started with ``VLLM_ENFORCE_STRICT_TOOL_CALLING=setting`` would."""
    if setting is None:
        os.environ.pop(_STRICT_ENV, None)
    else:
        os.environ[_STRICT_ENV] = setting
    from vllm import envs

    envs.disable_envs_cache()  # never enabled outside vLLM's engine; made sure
    for cls, declared in _PARSER_CLASSES.items():  # parents first: the order they were made
        if declared is _ABSENT:
            if _ATTRIBUTE in cls.__dict__:
                delattr(cls, _ATTRIBUTE)
        else:
            setattr(cls, _ATTRIBUTE, declared)
        _vllm_init_subclass(cls)


import vllm  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # noqa: E402
from vllm.reasoning import ReasoningParserManager  # noqa: E402
from vllm.tokenizers import get_tokenizer  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # noqa: E402
from vllm.tool_parsers.tool_strict_level import ToolStrictLevel  # noqa: E402
from vllm.utils.mistral import is_mistral_tokenizer, is_mistral_tool_parser  # noqa: E402

#: The tokenizers loaded, most recently used last; a few are kept (each is tens to hundreds of MB).
_TOKENIZERS: OrderedDict[str, Any] = OrderedDict()
_KEPT_TOKENIZERS = 3


class _Refused(Exception):
    """vLLM refuses the request; ``loc`` is where in it, when vLLM says."""

    def __init__(self, message: str, loc: list[str | int] | None = None) -> None:
        super().__init__(message)
        self.loc = loc or []


def _tokenizer(path: str, mode: str | None = None) -> Any:
    """The tokenizer of ``path``, loaded as ``--tokenizer-mode mode`` would (None: auto)."""
    key = path if mode is None else f"{mode}\0{path}"
    if key not in _TOKENIZERS:
        while len(_TOKENIZERS) >= _KEPT_TOKENIZERS:
            _TOKENIZERS.popitem(last=False)
        if mode is None:
            _TOKENIZERS[key] = get_tokenizer(path)
        else:
            _TOKENIZERS[key] = get_tokenizer(path, tokenizer_mode=mode)
    _TOKENIZERS.move_to_end(key)
    return _TOKENIZERS[key]


def _model_type(path: str) -> str | None:
    """The ``model_type`` of the model's config, when the tokenizer's directory has one."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as file:
            found = json.load(file).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _is_harmony(path: str) -> bool:
    # vLLM picks its Harmony parser from the model's config (model_type gpt_oss), when it has one.
    return _model_type(path) == "gpt_oss"


def _reasoning_parser_names() -> set[str]:
    return set(ReasoningParserManager.reasoning_parsers) | set(ReasoningParserManager.lazy_parsers)


def _reasoning_end(name: str, tokenizer: Any, kwargs: dict[str, Any]) -> tuple[str | None, str]:
    """The end marker of the reasoning parser ``name`` on ``tokenizer``, or why there is none."""
    try:
        parser = ReasoningParserManager.get_reasoning_parser(name)(
            tokenizer, chat_template_kwargs=kwargs
        )
        end = parser.reasoning_end_str
    except Exception as error:  # vLLM's parsers raise what they like; its message is the reason
        return None, f"vLLM's reasoning parser {name!r} refuses this tokenizer: {error}"
    if not end:
        return None, f"vLLM's reasoning parser {name!r} names no end marker"
    return str(end), ""


def formats(tokenizer_path: str) -> dict[str, Any]:
    """Every tool parser vLLM registers: whether it builds a tag, and whether it runs here."""
    tokenizer = _tokenizer(tokenizer_path)
    reasoning_names = _reasoning_parser_names()
    out = []
    for name in ToolParserManager.list_registered():
        entry: dict[str, Any] = {"name": name, "builds_tag": False, "reasoning_end": None}
        reasons = []
        try:
            tool_cls = ToolParserManager.get_tool_parser(name)
            parser_cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True)
            # A tag comes from the tool parser's structural-tag model, or from a parser that
            # folds the tools into its own tags (Cohere's _apply_structural_tags).
            entry["builds_tag"] = tool_cls.structural_tag_model is not None or hasattr(
                parser_cls, "_apply_structural_tags"
            )
            ParserManager.get_parser(
                tool_parser_name=name,
                enable_auto_tools=True,
                model_name=tokenizer_path,
                is_harmony=_is_harmony(tokenizer_path),
                tokenizer=tokenizer,
            )
            entry["available"] = True
        except Exception as error:  # an import that fails, or vLLM's start-up check
            entry["available"] = False
            reasons.append(str(error))
        if name in reasoning_names:
            end, why = _reasoning_end(name, tokenizer, {})
            entry["reasoning_end"] = end
            if why:
                reasons.append(f"reasoning end marker unavailable: {why}")
        entry["reason"] = "; ".join(reasons) or None
        out.append(entry)
    return {"formats": out}


def serve_flags(tokenizer_path: str) -> dict[str, Any]:
    """The values vLLM takes for the serve flags a tools source sets: every reasoning parser
    it registers (with its end marker on this tokenizer, or why there is none) and every tool
    strict level."""
    tokenizer = _tokenizer(tokenizer_path)
    parsers = []
    for name in sorted(_reasoning_parser_names()):
        end, why = _reasoning_end(name, tokenizer, {})
        parsers.append({"name": name, "reasoning_end": end, "reason": why or None})
    levels = [level.name.lower() for level in ToolStrictLevel]
    return {"reasoning_parsers": parsers, "strict_levels": levels}


def _chat_request(message: dict[str, Any]) -> ChatCompletionRequest:
    body: dict[str, Any] = {
        "model": "maskscope",
        "messages": [{"role": "user", "content": ""}],
        "tools": message["tools"],
        "tool_choice": message["tool_choice"],
        "parallel_tool_calls": message["parallel_tool_calls"],
    }
    if message.get("response_format") is not None:
        body["response_format"] = message["response_format"]
    thinking = {"enabled": True, "disabled": False}.get(message["reasoning"])
    if thinking is not None:
        # The two switches vLLM's parsers read (Qwen's enable_thinking, DeepSeek's thinking).
        body["chat_template_kwargs"] = {"enable_thinking": thinking, "thinking": thinking}
    return _validated(body)


def _validated(body: dict[str, Any]) -> ChatCompletionRequest:
    """``body`` as vLLM's request model validates it; its refusal at the field it names."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        loc = [part for part in first["loc"] if isinstance(part, (str, int))]
        raise _Refused(f"vLLM refuses the request: {first['msg']}", loc) from None
    except VLLMValidationError as error:
        raise _refused(error) from None


def _refused(error: VLLMValidationError) -> _Refused:
    loc = (error.parameter or "").split(".") if error.parameter else []
    return _Refused(f"vLLM refuses the request: {error.args[0]}", list(loc))


def _parser_class(message: dict[str, Any], tokenizer: Any, reasoning_parser: str | None) -> Any:
    if message["format"] not in ToolParserManager.list_registered():
        raise _Refused(f"vLLM has no tool parser {message['format']!r}", ["format"])
    if reasoning_parser and reasoning_parser not in _reasoning_parser_names():
        raise _Refused(f"vLLM has no reasoning parser {reasoning_parser!r}", ["reasoning_parser"])
    try:
        ToolStrictLevel.from_name(message.get("strict_level") or "auto")
    except ValueError as error:
        raise _Refused(str(error), ["strict_level"]) from None
    try:
        return ParserManager.get_parser(
            tool_parser_name=message["format"],
            reasoning_parser_name=reasoning_parser,
            enable_auto_tools=True,
            model_name=message["tokenizer"],
            is_harmony=_is_harmony(message["tokenizer"]),
            tool_strict_level=message.get("strict_level") or "auto",
            tokenizer=tokenizer,
        )
    except (TypeError, ValueError, KeyError, ImportError) as error:
        raise _Refused(str(error), ["format"]) from None


def build(message: dict[str, Any]) -> dict[str, Any]:
    """The structured-output constraint vLLM's server derives from one request's tools."""
    tokenizer = _tokenizer(message["tokenizer"])
    request = _chat_request(message)
    # What the server passes its parsers: the request's chat template kwargs, as it builds them.
    template_kwargs = request.build_chat_params(None, "auto").chat_template_kwargs
    request, parser_cls, reasoning = _adjusted(message, request, tokenizer, template_kwargs)
    outputs = request.structured_outputs
    tag = json.loads(outputs.structural_tag) if outputs and outputs.structural_tag else None
    return {
        "tag": tag,
        "reason": None if tag is not None else _no_tag_reason(message, parser_cls, outputs),
        **reasoning,
        "xgrammar_calls": list(_XGRAMMAR_CALLS),
        "constraint": _constraint(outputs),
        "chat_template_kwargs": _jsonable(dict(template_kwargs or {})),
    }


def _adjusted(
    message: dict[str, Any], request: Any, tokenizer: Any, template_kwargs: Any
) -> tuple[Any, Any, dict[str, Any]]:
    """``request`` as the server's parsers adjust it (``message``: the tool parser ``format``,
    ``reasoning_parser``, ``strict_level``, ``tokenizer``), the parser class, and the reasoning
    parser's end marker (or why there is none)."""
    reasoning_parser = message.get("reasoning_parser")
    reasoning = _reasoning(reasoning_parser, tokenizer, template_kwargs)
    unavailable = reasoning["reasoning_end_unavailable"]
    # A reasoning parser that refuses the tokenizer stops `vllm serve` from starting; the tag the
    # tool parser builds is still shown, built without it, and the end marker said unavailable.
    parser_cls = _parser_class(message, tokenizer, None if unavailable else reasoning_parser)
    _XGRAMMAR_CALLS.clear()
    tool_choice = request.tool_choice
    adjust = (
        parser_cls.always_adjust_request
        or parser_cls.reasoning_parser_cls is not None
        or tool_choice != "none"
        or (is_mistral_tool_parser(parser_cls.tool_parser_cls) and is_mistral_tokenizer(tokenizer))
    )
    if adjust:
        parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=template_kwargs)
        try:
            request = parser.adjust_request(request=request)
        except VLLMValidationError as error:
            raise _refused(error) from None
        except (TypeError, ValueError) as error:
            raise _Refused(f"vLLM refuses the request: {error}") from None
    return request, parser_cls, reasoning


def _reasoning(name: str | None, tokenizer: Any, kwargs: Any) -> dict[str, Any]:
    """The answer's ``reasoning_end`` and ``reasoning_end_unavailable`` for the reasoning parser
    ``name`` (None: no parser, neither)."""
    end, why = _reasoning_end(name, tokenizer, kwargs) if name else (None, "")
    return {"reasoning_end": end, "reasoning_end_unavailable": why or None}


#: The build message's fields that are serve flags, by the request source's names for them.
_SERVE_FLAG = {
    "format": "tool_call_parser",
    "strict_level": "tool_strict_level",
    "reasoning_parser": "reasoning_parser",
}


def derive(message: dict[str, Any]) -> dict[str, Any]:
    """What vLLM's server makes of a pasted Chat Completions request (``message["body"]``)
    under its ``vllm serve`` flags (``message["serve"]``): the prompt its chat template renders,
    the constraint the engine is handed (``to_sampling_params``' structured outputs), the
    reasoning parser's end marker, and the end of generation."""
    tokenizer = _tokenizer(message["tokenizer"])
    serve = message.get("serve") or {}
    try:
        request = _validated({"model": "maskscope", **message["body"]})
    except _Refused as error:
        raise _Refused(str(error), ["body", *error.loc]) from None
    params = request.build_chat_params(message.get("chat_template"), "auto")
    parser = serve.get("tool_call_parser")
    if parser:
        flags = {
            "format": parser,
            "tokenizer": message["tokenizer"],
            "strict_level": serve.get("tool_strict_level"),
            "reasoning_parser": serve.get("reasoning_parser"),
        }
        try:
            kwargs = params.chat_template_kwargs
            request, _, reasoning = _adjusted(flags, request, tokenizer, kwargs)
        except _Refused as error:
            head = error.loc[0] if error.loc else None
            loc: list[str | int] = ["body", *error.loc]
            if head in _SERVE_FLAG:
                loc = ["serve", _SERVE_FLAG[head]]
            raise _Refused(str(error), loc) from None
    else:
        name = serve.get("reasoning_parser")
        if name and name not in _reasoning_parser_names():
            raise _Refused(f"vLLM has no reasoning parser {name!r}", ["serve", "reasoning_parser"])
        reasoning = _reasoning(name, tokenizer, params.chat_template_kwargs)
    prompt = _rendered(request, params, tokenizer, message["tokenizer"])
    constraint = _constraint(request.extract_structured_outputs())
    return {
        "prompt": prompt,
        "prompt_tokens": len(tokenizer.encode(prompt, add_special_tokens=False)),
        "constraint": constraint,
        "as_grammar": _as_grammar(constraint),
        **reasoning,
        "min_tokens": request.min_tokens,
        "stop_token_ids": list(request.stop_token_ids or []),
        "stop": [request.stop] if isinstance(request.stop, str) else list(request.stop or []),
        "chat_template_kwargs": _jsonable(dict(params.chat_template_kwargs or {})),
    }


def _as_grammar(constraint: dict[str, Any] | None) -> dict[str, Any] | None:
    """A ``choice`` or ``grammar`` constraint as the xgrammar backend reads it: the choices as
    its EBNF (``choice_as_grammar``), and whether a grammar is Lark (``grammar_is_likely_lark``)."""
    from vllm.v1.structured_output.utils import choice_as_grammar, grammar_is_likely_lark

    if constraint is None:
        return None
    if "choice" in constraint:
        return {"ebnf": choice_as_grammar(constraint["choice"])}
    if "grammar" in constraint:
        lark = grammar_is_likely_lark(constraint["grammar"])
        return {"lark" if lark else "ebnf": constraint["grammar"]}
    return None


def _rendered(request: Any, params: Any, tokenizer: Any, path: str) -> str:
    """The prompt vLLM's chat renderer makes of the request's messages and tools."""
    from types import SimpleNamespace

    from vllm.renderers.hf import safe_apply_chat_template

    # The model settings the renderer reads when it looks for a template (the tokenizer's
    # directory is the model's: no revision, no remote code).
    config = SimpleNamespace(
        tokenizer=path,
        model=path,
        tokenizer_revision=None,
        code_revision=None,
        trust_remote_code=False,
        hf_config=SimpleNamespace(model_type=_model_type(path)),
    )
    messages = [m if isinstance(m, dict) else _jsonable(m) for m in request.messages]
    tools = None if request.tools is None else [tool.model_dump() for tool in request.tools]
    try:
        text = safe_apply_chat_template(
            config,
            tokenizer,
            messages,
            tools=tools,
            chat_template=params.chat_template,
            tokenize=False,
            **dict(params.chat_template_kwargs or {}),  # add_generation_prompt among them
        )
    except Exception as error:  # a template's own error (or none found), shown to its author
        where: list[str | int] = ["chat_template"] if params.chat_template else ["body", "messages"]
        raise _Refused(f"vLLM's chat renderer refuses the request: {error}", where) from None
    return str(text)


def encoders() -> dict[str, Any]:
    """The tokenizer modes whose tokenizer renders chat with a Python prompt encoder, read from
    vLLM's own registries: a mode of its ``TokenizerRegistry`` whose tokenizer module renders
    with an ``encode_messages`` (DeepSeek V3.2, V4, V4.1), with the renderer its
    ``RENDERER_REGISTRY`` picks for the same mode."""
    import importlib

    from vllm.renderers.registry import RENDERER_REGISTRY
    from vllm.tokenizers.registry import TokenizerRegistry

    found: dict[str, Any] = {}
    for mode, (module_name, class_name) in TokenizerRegistry.tokenizers.items():
        try:
            module = importlib.import_module(module_name)
        except Exception:  # a mode whose optional library is missing (mistral_common...)
            continue
        encode = getattr(module, "encode_messages", None)
        if encode is None or mode not in RENDERER_REGISTRY.renderers:
            continue
        renderer_module, renderer_class = RENDERER_REGISTRY.renderers[mode]
        found[mode] = {
            "mode": mode,
            "tokenizer": f"{module_name}.{class_name}",
            "encoder": f"{encode.__module__}.{encode.__name__}",
            "renderer": f"{renderer_module}.{renderer_class}",
        }
    return {"encoders": found}


def render(message: dict[str, Any]) -> dict[str, Any]:
    """The prompt vLLM's server renders of ``message["messages"]`` and ``tools``: by the
    prompt encoder of ``tokenizer_mode`` when one is named, else by its chat renderer (the
    template ``chat_template``, else the tokenizer's own), as ``derive`` renders."""
    path, mode = message["tokenizer"], message.get("tokenizer_mode")
    body: dict[str, Any] = {
        "model": "maskscope",
        "messages": message["messages"],
        "add_generation_prompt": bool(message.get("add_generation_prompt", True)),
        "chat_template_kwargs": dict(message.get("chat_template_kwargs") or {}),
    }
    if message.get("tools"):
        body["tools"] = message["tools"]
    request = _validated(body)
    params = request.build_chat_params(message.get("chat_template"), "auto")
    if mode is None:
        tokenizer = _tokenizer(path)
        text = _rendered(request, params, tokenizer, path)
        by = "vllm.renderers.hf.safe_apply_chat_template"
    else:
        tokenizer = _tokenizer(path, mode)
        text, by = _encoded(mode, request, params, tokenizer, path)
    tokens = len(tokenizer.encode(text, add_special_tokens=False))
    return {"text": text, "prompt_tokens": tokens, "rendered_by": by}


def _encoded(mode: str, request: Any, params: Any, tokenizer: Any, path: str) -> tuple[str, str]:
    """The prompt the renderer of ``mode`` makes (its ``render_messages``, given what the
    server's ``preprocess_chat`` gives it: the tools and ``tokenize=False``), and the encoder
    that wrote it."""
    from types import SimpleNamespace

    from vllm.renderers.registry import RENDERER_REGISTRY

    known = encoders()["encoders"]
    if mode not in known:
        names = ", ".join(known) or "none"
        raise _Refused(
            f"vLLM {vllm.__version__} has no prompt encoder for --tokenizer-mode {mode!r} "
            f"(its encoders: {names})",
            ["tokenizer_mode"],
        )
    # The model settings a renderer reads for a text-only model (no weights are loaded here).
    model = SimpleNamespace(
        renderer_num_workers=1,
        supports_multimodal_inputs=False,
        is_multimodal_model=False,
        multimodal_config=None,
        enable_prompt_embeds=False,
        hf_config=SimpleNamespace(model_type=_model_type(path)),
    )
    config = SimpleNamespace(
        model_config=model, parallel_config=SimpleNamespace(_api_process_rank=0)
    )
    tools = None if request.tools is None else [tool.model_dump() for tool in request.tools]
    params = params.with_defaults({"tools": tools, "tokenize": False})
    renderer = RENDERER_REGISTRY.load_renderer(mode, config, tokenizer)
    try:
        _, prompt = renderer.render_messages(list(request.messages), params)
    except Exception as error:  # the encoder's own refusal of the messages, shown as it is
        raise _Refused(
            f"vLLM's {mode} encoder refuses the messages: {error}", ["messages"]
        ) from None
    return str(prompt["prompt"]), str(known[mode]["encoder"])


#: The fields of vLLM's StructuredOutputsParams that hold a constraint.
_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _constraint(outputs: Any) -> dict[str, Any] | None:
    """What constrains the request's output as vLLM derived it (the one field of its
    StructuredOutputsParams that is set), or None: nothing does."""
    if outputs is None:
        return None
    for name in _CONSTRAINTS:
        value = getattr(outputs, name, None)
        if value is not None and value is not False:
            return {name: value}
    return None


def _no_tag_reason(message: dict[str, Any], parser_cls: Any, outputs: Any) -> str:
    """Why vLLM made no structural tag of this request, in the terms of its own code."""
    from vllm import envs

    tool_cls = parser_cls.tool_parser_cls
    choice = message["tool_choice"]
    if outputs is not None and outputs.json is not None:
        constraint = "a JSON Schema of the call list (vLLM's JSON tool-call format) constrains it"
    elif outputs is not None and (outputs.json_object or outputs.regex or outputs.grammar):
        constraint = "the response_format constrains it"
    else:
        constraint = "nothing constrains the output"
    if choice == "none":
        why = "tool_choice is none: the tools are only shown to the model"
    elif not envs.VLLM_ENFORCE_STRICT_TOOL_CALLING:
        why = "VLLM_ENFORCE_STRICT_TOOL_CALLING is off: vLLM builds no structural tag"
    elif getattr(tool_cls, "structural_tag_model", None) is None:
        why = f"vLLM's {message['format']!r} tool parser has no structural tag"
    elif choice == "auto":
        why = (
            "tool_choice is auto, no tool says strict: true, and the strict level is auto: "
            "vLLM leaves the call unconstrained"
        )
    else:
        why = "vLLM's parser built no structural tag for this request"
    return f"{why}; {constraint}"


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    try:
        return _answer_once(message)
    except MemoryError:
        pass  # the tokenizers kept are the memory there is to give back: forget them, once
    _forget()
    try:
        return _answer_once(message)
    except MemoryError:
        _forget()
        said = "the request needs more memory than the runner's cap, even alone"
        return {"error": {"message": said, "type": "memory"}}


def _forget() -> None:
    """Give back the memory kept between requests: the tokenizers, and the replays' backends."""
    _TOKENIZERS.clear()
    masks = sys.modules.get("vllm_masks")
    if masks is not None:
        masks.forget()
    gc.collect()


def _answer_once(message: dict[str, Any]) -> dict[str, Any]:
    try:
        _apply_strict(message.get("strict"))
        if message.get("op") == "formats":
            return formats(message["tokenizer"])
        if message.get("op") == "build":
            return build(message)
        if message.get("op") == "serve_flags":
            return serve_flags(message["tokenizer"])
        if message.get("op") == "derive":
            return derive(message)
        if message.get("op") == "encoders":
            return encoders()
        if message.get("op") == "render":
            return render(message)
        if message.get("op") == "replay":
            return _replay(message)
        if message.get("op") == "hello":
            return {"versions": _versions(), "pid": os.getpid()}
        return {"error": {"message": f"unknown op {message.get('op')!r}", "type": "op"}}
    except _Refused as error:
        return {"error": {"message": str(error), "type": "refused", "loc": error.loc}}
    except MemoryError:
        raise
    except Exception as error:  # anything else vLLM raises: reported, the runner lives on
        return {"error": {"message": f"{type(error).__name__}: {error}", "type": "internal"}}


#: What vLLM's structured-output backends called their library with in the last replay (its
#: answer's ``compile_calls``): each of xgrammar's ``GrammarCompiler.compile_*`` calls with every
#: argument bound (xgrammar's own defaults filled in), and the grammar
#: ``serialize_guidance_grammar`` handed llguidance. ``check --stack`` reads the options a release
#: compiles with from these calls (its ``any_whitespace``, ``separators``...), never from a table.
_COMPILE_CALLS: list[dict[str, Any]] = []
_XGRAMMAR_COMPILES = (
    "compile_json_schema",
    "compile_grammar",
    "compile_regex",
    "compile_structural_tag",
)
_RECORDING: list[bool] = []


def _record_compiles() -> None:
    """Wrap the library entry points vLLM's backends compile through (once, before a replay)."""
    import inspect

    from vllm.v1.structured_output import backend_guidance

    if _RECORDING:
        return
    _RECORDING.append(True)

    def recorded(name: str, original: Any) -> Any:
        signature = inspect.signature(original)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
            _COMPILE_CALLS.append({"call": name, "arguments": _jsonable(arguments)})
            return original(*args, **kwargs)

        return call

    for name in _XGRAMMAR_COMPILES:
        setattr(
            xgrammar.GrammarCompiler, name, recorded(name, getattr(xgrammar.GrammarCompiler, name))
        )
    serialize = backend_guidance.serialize_guidance_grammar

    def serialized(*args: Any, **kwargs: Any) -> Any:
        grammar = serialize(*args, **kwargs)
        _COMPILE_CALLS.append({"call": "serialize_guidance_grammar", "grammar": grammar})
        return grammar

    backend_guidance.serialize_guidance_grammar = serialized


def _replay(message: dict[str, Any]) -> dict[str, Any]:
    import vllm_masks  # type: ignore[import-not-found]  # beside this script, on its path

    _record_compiles()
    _COMPILE_CALLS.clear()

    if message.get("build") is not None:  # a tools source: the stack's own derivation
        built = build({**message["build"], "tokenizer": message["tokenizer"]})
        if built["constraint"] is None:
            free: dict[str, Any] = vllm_masks.unconstrained(message, built)
            return free
        message = {
            **message,
            "structured_outputs": built["constraint"],
            "chat_template_kwargs": built["chat_template_kwargs"],
            "reasoning_parser": message.get("reasoning_parser")
            or message["build"].get("reasoning_parser"),
        }
    try:
        answer: dict[str, Any] = vllm_masks.replay(message, _tokenizer(message["tokenizer"]))
        if message.get("build") is not None:
            answer["build"] = built
        answer["compile_calls"] = list(_COMPILE_CALLS)
        return answer
    except (VLLMValidationError, ValueError, TypeError) as error:
        raise _Refused(f"vLLM refuses the request: {error}", ["grammar"]) from None


def _versions() -> dict[str, str]:
    """The versions of what this process imports (its own distributions, as it sees them)."""
    import importlib.metadata

    found = {"vllm": vllm.__version__}
    for name in ("xgrammar", "llguidance", "transformers"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = ""
    return found


def _serve_socket(path: str, idle_s: float) -> None:
    """Answer one request per connection on the unix socket ``path`` (its directory is the
    user's alone) until no connection comes for ``idle_s`` seconds."""
    import socket

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)  # a runner that died left it; the client holds the start lock
    old_mask = os.umask(0o177)
    try:
        server.bind(path)
    finally:
        os.umask(old_mask)
    server.listen(8)
    server.settimeout(idle_s)
    _ANSWERS.write(json.dumps({"ready": True, "versions": _versions(), "pid": os.getpid()}) + "\n")
    _ANSWERS.flush()
    _ANSWERS.close()  # the starter may leave: nothing more is written there
    try:
        while True:
            try:
                connection, _ = server.accept()
            except TimeoutError:
                return
            connection.settimeout(60)  # a client that connects and says nothing holds no one
            try:
                with connection, connection.makefile("rwb") as stream:
                    line = stream.readline()
                    if line.strip():
                        stream.write(json.dumps(_answer(json.loads(line))).encode() + b"\n")
                        stream.flush()
            except (OSError, ValueError):  # the client left, or sent no JSON: the next one
                continue
    finally:
        if os.path.exists(path):
            os.unlink(path)


def main() -> None:
    """Answer requests until stdin closes, or on ``--socket PATH`` until idle."""
    sockets = _option(sys.argv, "--socket")
    if sockets:
        _serve_socket(sockets[-1], float((_option(sys.argv, "--idle-s") or ["900"])[-1]))
        return
    _ANSWERS.write(json.dumps({"ready": True, "versions": _versions()}) + "\n")
    _ANSWERS.flush()
    for line in sys.stdin:
        if line.strip():
            _ANSWERS.write(json.dumps(_answer(json.loads(line))) + "\n")
            _ANSWERS.flush()


if __name__ == "__main__":
    main()
