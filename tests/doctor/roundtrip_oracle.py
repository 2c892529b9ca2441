"""The oracle of the template round trip: one vLLM release walks a rendered turn the obvious way.

Run by ``tests.vllm_oracle.run_vllm`` (``.venv-vllm``'s Python, the stack's directories first on
its path). Reads ``{"cases": [...]}`` on stdin; writes ``{"results": [...]}`` as its last line.
Each case is ``{"tokenizer", "vocab_size", "format", "tools", "tool_choice", "reasoning_parser",
"chat_template_kwargs", "prompt", "text"}``: the request's tag is what the release's tool parser
makes of it (``adjust_request``, which calls xgrammar's ``get_model_structural_tag``) under
``VLLM_ENFORCE_STRICT_TOOL_CALLING=1``, compiled by an ``XgrammarBackend``; the turn is the
text's token ids (the tokenizer's own ``encode``) then its EOS. The reasoning parser (built with
the request's chat template kwargs) decides where the grammar starts: at once when the prompt's
ids already end the reasoning, else after ``is_reasoning_end`` on the ids so far (an implicit end,
``find_reasoning_end``, is fed to the grammar). Written apart from the runner on purpose: no
``StructuredOutputManager``, no ``Request``, no Maskscope.

Each result is ``{"accepted": bool, "refused_at": int|None, "ids": [...]}``.
"""

import json
import os
import sys
from types import SimpleNamespace
from typing import Any

os.environ["VLLM_ENFORCE_STRICT_TOOL_CALLING"] = "1"  # read when the parser classes load
_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # vLLM logs to stdout

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
        chat_template_kwargs=case["chat_template_kwargs"],
    )
    kwargs = case["chat_template_kwargs"]
    request = parser_cls(tok, request.tools, chat_template_kwargs=kwargs).adjust_request(request)
    tag: str = request.structured_outputs.structural_tag
    return tag


_BACKENDS: dict[tuple[str, int], tuple[Any, Any]] = {}


def backend_of(case: dict[str, Any]) -> tuple[Any, Any]:
    """The tokenizer and an ``XgrammarBackend`` on it (one per tokenizer: building one reads
    the whole vocabulary)."""
    key = (case["tokenizer"], case["vocab_size"])
    if key not in _BACKENDS:
        tok = get_tokenizer(case["tokenizer"])
        config = SimpleNamespace(
            structured_outputs_config=StructuredOutputsConfig(),
            model_config=SimpleNamespace(hf_config=SimpleNamespace(model_type="")),
            speculative_config=None,
        )
        _BACKENDS[key] = tok, XgrammarBackend(config, tokenizer=tok, vocab_size=key[1])
    return _BACKENDS[key]


def run(case: dict[str, Any]) -> dict[str, Any]:
    tok, backend = backend_of(case)
    grammar = backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, tag_of(case, tok))
    ids = [*tok.encode(case["text"], add_special_tokens=False), tok.eos_token_id]
    reasoner: Any = None
    ended = True
    if case["reasoning_parser"]:
        parser = ReasoningParserManager.get_reasoning_parser(case["reasoning_parser"])
        reasoner = parser(tok, chat_template_kwargs=case["chat_template_kwargs"])
        ended = reasoner.is_reasoning_end(tok.encode(case["prompt"], add_special_tokens=False))
    seen: list[int] = []
    for index, token in enumerate(ids):
        if not ended:
            seen.append(token)
            if not reasoner.is_reasoning_end(seen):
                continue
            ended = True
            found = reasoner.find_reasoning_end([token])
            if not (found and found.implicit):
                continue  # an explicit end marker is the reasoning's, never the grammar's
        if not grammar.accept_tokens("oracle", [token]):
            return {"accepted": False, "refused_at": index, "ids": ids}
    return {"accepted": True, "refused_at": None, "ids": ids}


def main() -> None:
    question = json.load(sys.stdin)
    _OUT.write(json.dumps({"results": [run(case) for case in question["cases"]]}) + "\n")
    _OUT.flush()


main()
