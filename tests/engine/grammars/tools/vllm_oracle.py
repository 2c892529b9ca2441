"""The oracle of the vLLM builder's tests: vLLM's code called the obvious way, in .venv-vllm.

Run as ``<.venv-vllm>/bin/python -I vllm_oracle.py``: reads ``{"cases": [...], "formats_on":
str|None}`` on stdin, writes ``{"results": [...], "formats": {...}}`` on stdout. Each case is
``{"tokenizer", "format", "tools", "tool_choice", "parallel_tool_calls", "reasoning",
"reasoning_parser", "strict_level", "response_format"}``; its result is ``{"tag", "reasoning_end"}``
or ``{"error"}``. Written apart from ``app/engine/grammars/tools/vllm_runner.py`` on purpose: a
parser
composed the way ``vllm serve --enable-auto-tool-choice`` composes it, a ChatCompletionRequest,
``adjust_request``, and the structural tag it leaves on the request.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # vLLM logs to stdout

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # noqa: E402
from vllm.tokenizers import get_tokenizer  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # noqa: E402

_tokenizers: dict[str, Any] = {}


def tokenizer(path: str) -> Any:
    if path not in _tokenizers:
        _tokenizers[path] = get_tokenizer(path)
    return _tokenizers[path]


def run(case: dict[str, Any]) -> dict[str, Any]:
    tok = tokenizer(case["tokenizer"])
    kwargs: dict[str, Any] = {}
    if case["reasoning"] != "auto":
        on = case["reasoning"] == "enabled"
        kwargs = {"enable_thinking": on, "thinking": on}
    try:
        parser_cls = ParserManager.get_parser(
            tool_parser_name=case["format"],
            reasoning_parser_name=case["reasoning_parser"],
            enable_auto_tools=True,
            tool_strict_level=case["strict_level"] or "auto",
            tokenizer=tok,
        )
    except Exception as error:
        return {"error": str(error)}
    request = ChatCompletionRequest(
        model="oracle",
        messages=[{"role": "user", "content": "hello"}],
        tools=case["tools"],
        tool_choice=case["tool_choice"],
        parallel_tool_calls=case["parallel_tool_calls"],
        response_format=case["response_format"],
        chat_template_kwargs=kwargs or None,
    )
    parser = parser_cls(tok, request.tools, chat_template_kwargs=kwargs)
    if case["tool_choice"] != "none" or parser.reasoning_parser is not None:
        request = parser.adjust_request(request)
    outputs = request.structured_outputs
    tag = None
    if outputs is not None and outputs.structural_tag is not None:
        tag = json.loads(outputs.structural_tag)
    reasoning = parser.reasoning_parser
    return {"tag": tag, "reasoning_end": reasoning.reasoning_end_str if reasoning else None}


def formats(path: str) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for name in ToolParserManager.list_registered():
        try:
            ParserManager.get_parser(
                tool_parser_name=name,
                enable_auto_tools=True,
                model_name=path,
                tokenizer=tokenizer(path),
            )
            out[name] = {"available": True}
        except Exception as error:
            out[name] = {"available": False, "error": str(error)}
    return out


def main() -> None:
    question = json.load(sys.stdin)
    answer: dict[str, Any] = {"results": [run(case) for case in question["cases"]]}
    if question.get("formats_on"):
        answer["formats"] = formats(question["formats_on"])
    _OUT.write(json.dumps(answer))
    _OUT.flush()


if __name__ == "__main__":
    main()
