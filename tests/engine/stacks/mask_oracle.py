"""The oracle of a stack's masks: one vLLM release called the obvious way, in its environment.

Run by ``tests.vllm_oracle.run_vllm`` (``.venv-vllm``'s Python, the stack's directories first on
its path). Reads ``{"cases": [...]}`` on stdin; writes ``{"results": [...]}`` as its last line.
Each case is ``{"tokenizer", "vocab_size", "format", "tools", "tool_choice", "reasoning_parser",
"token_ids"}``, or ``{"tokenizer", "vocab_size", "json_schema", "token_ids"}`` (a
``response_format`` schema, masked from token 0). Written apart from the runner
(``vllm_masks.py``) on purpose: no ``StructuredOutputManager``, no ``Request``; the tool
parser's ``adjust_request`` for the tag, an ``XgrammarBackend`` compiling it, the reasoning
parser's ``is_reasoning_end`` on the ids so far (its ``find_reasoning_end`` to tell an implicit
end, whose token is content), ``fill_bitmask`` once the reasoning is over, and while it lasts
every token allowed but the release's ``implicit_reasoning_end_token_ids`` the grammar cannot
start with (none before 0.34.0, which has no such attribute).
"""

import base64
import json
import os
import sys
from types import SimpleNamespace
from typing import Any

_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # vLLM logs to stdout

import numpy as np  # noqa: E402
from vllm.config import StructuredOutputsConfig  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # noqa: E402
from vllm.reasoning import ReasoningParserManager  # noqa: E402
from vllm.tokenizers import get_tokenizer  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions  # noqa: E402
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend  # noqa: E402


def tag_of(case: dict[str, Any], tok: Any) -> str:
    parser_cls = ParserManager.get_parser(
        tool_parser_name=case["format"],
        reasoning_parser_name=case["reasoning_parser"],
        enable_auto_tools=True,
        tokenizer=tok,
    )
    request = ChatCompletionRequest(
        model="oracle",
        messages=[{"role": "user", "content": "hi"}],
        tools=case["tools"],
        tool_choice=case["tool_choice"],
    )
    request = parser_cls(tok, request.tools).adjust_request(request)
    tag: str = request.structured_outputs.structural_tag
    return tag


def run(case: dict[str, Any]) -> dict[str, Any]:
    tok = get_tokenizer(case["tokenizer"])
    config = SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(),
        model_config=SimpleNamespace(hf_config=SimpleNamespace(model_type="")),
        speculative_config=None,
    )
    backend = XgrammarBackend(config, tokenizer=tok, vocab_size=case["vocab_size"])
    tag = None
    if "json_schema" in case:
        grammar = backend.compile_grammar(StructuredOutputOptions.JSON, case["json_schema"])
    else:
        tag = tag_of(case, tok)
        grammar = backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, tag)
    reasoner: Any = None
    blocked: list[int] = []
    if case.get("reasoning_parser"):
        reasoner = ReasoningParserManager.get_reasoning_parser(case["reasoning_parser"])(tok)
        implicit = sorted(getattr(reasoner, "implicit_reasoning_end_token_ids", ()))
        blocked = [t for t in implicit if not grammar.validate_tokens([t])]
    bitmask = backend.allocate_token_bitmask(1)
    rows: list[str] = []
    seen: list[int] = []
    end: dict[str, Any] | None = None
    for token in case["token_ids"]:
        reasoning = reasoner is not None and end is None
        if reasoning:
            row = np.full(bitmask.shape[1], 0xFFFFFFFF, dtype=np.uint32)
            for b in blocked:
                row[b >> 5] &= np.uint32(~(1 << (b & 31)) & 0xFFFFFFFF)
        else:
            grammar.fill_bitmask(bitmask, 0)
            row = bitmask[0].numpy().view(np.uint32).copy()
        allowed = bool((int(row[token >> 5]) >> (token & 31)) & 1)
        rows.append(base64.b64encode(row.tobytes()).decode())
        if not allowed:
            break
        if reasoning:
            seen.append(token)
            if reasoner.is_reasoning_end(seen):
                found = reasoner.find_reasoning_end([token])
                end = {"index": len(seen) - 1, "implicit": bool(found and found.implicit)}
                if end["implicit"] and not grammar.accept_tokens("oracle", [token]):
                    break
        elif not grammar.accept_tokens("oracle", [token]):
            break
    return {
        "tag": None if tag is None else json.loads(tag),
        "rows": rows,
        "reasoning_end": end,
        "blocked": blocked,
    }


def main() -> None:
    question = json.load(sys.stdin)
    _OUT.write(json.dumps({"results": [run(case) for case in question["cases"]]}) + "\n")
    _OUT.flush()


main()
