"""Structural tags under llguidance, written as vLLM 0.32.0's guidance backend writes them.

vLLM's own ``serialize_guidance_grammar`` (run in ``.venv-vllm``) is the oracle for the grammar;
the masks come from the real llguidance, on the default model and on Qwen3.6's tokenizer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from transformers import AutoTokenizer

from app.engine import Engine, GrammarKind, GrammarSpec, MaskingLibrary
from app.engine.grammars.llguidance import LlguidanceCompiler
from app.engine.grammars.llguidance.tags import ARGUMENTS_UNCHECKED, tag_grammar
from app.engine.masking import new_masking
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.engine.stepper.replay import replay
from app.engine.tokens import Tokens
from app.exceptions import GrammarError
from tests.vllm_oracle import run_vllm

ARGS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TAGS: list[dict[str, Any]] = [
    {
        "structures": [{"begin": "<function=weather>", "schema": ARGS, "end": "</function>"}],
        "triggers": ["<function="],
    },
    {  # two triggers, two structures, a schema given as a string, an empty end
        "structures": [
            {"begin": "<function=a>", "schema": json.dumps(ARGS), "end": "</function>"},
            {"begin": "[[call b]] ", "schema": {"type": "array"}, "end": ""},
        ],
        "triggers": ["<function=", "[[call"],
    },
]

_SERIALIZE = """
import json, sys
from vllm.v1.structured_output.backend_guidance import serialize_guidance_grammar
from vllm.v1.structured_output.backend_types import StructuredOutputOptions
tags = json.load(sys.stdin)
kind = StructuredOutputOptions.STRUCTURAL_TAG
print(json.dumps([serialize_guidance_grammar(kind, json.dumps(tag)) for tag in tags]))
"""


def _spec(tag: Any) -> GrammarSpec:
    source = json.dumps(tag)
    return GrammarSpec(GrammarKind.STRUCTURAL_TAG, source, library=MaskingLibrary.LLGUIDANCE)


def test_the_grammar_is_the_one_vllms_guidance_backend_builds(engine: Engine) -> None:
    expected = run_vllm(_SERIALIZE, TAGS)
    tokenizer = engine.llguidance.tokenizer()
    assert [tag_grammar(json.dumps(tag), tokenizer).grammar for tag in TAGS] == expected
    compiled = engine.compile(_spec(TAGS[0]))
    assert compiled.grammar_text == expected[0] and compiled.warnings[0] == ARGUMENTS_UNCHECKED


@pytest.mark.parametrize(
    ("tag", "pointer", "words"),
    [
        ({"type": "structural_tag", "format": {"type": "const_string", "value": "x"}},
         "/format", "legacy"),
        ({"structures": [{"begin": "<fn>", "schema": ARGS, "end": ""}], "triggers": ["<f="]},
         "/structures/0/begin", "Trigger <fn> not found in triggers ['<f=']"),
        ({"structures": [], "triggers": ["<f="]}, "/structures", "No structural tags"),
        ({"structures": [{"begin": "x", "schema": ARGS, "end": ""}], "triggers": [""]},
         "/triggers/0", "an empty trigger"),
        ({"structures": [{"begin": "<[99999999]>", "schema": ARGS, "end": ""}],
          "triggers": ["<[99999999]>"]}, "/triggers/0", "no special token"),
    ],
)  # fmt: skip
def test_what_llguidance_cannot_take_is_refused_where_it_is(
    engine: Engine, tag: Any, pointer: str, words: str
) -> None:
    with pytest.raises(GrammarError) as caught:
        engine.compile(_spec(tag))
    assert caught.value.pointer == pointer and words in caught.value.message


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    """Qwen3.6's production tokenizer (``<tool_call>`` is special token 248058)."""
    directory = tokenizer_dir("qwen3.6", tmp_path_factory.mktemp("qwen"))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    stop = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    return Tokens.from_tokenizer(tokenizer, len(tokenizer), stop)


def _hermes(trigger: str) -> dict[str, Any]:
    begin = trigger + '\n{"name": "weather", "arguments": '
    return {"structures": [{"begin": begin, "schema": ARGS, "end": "}\n</tool_call>"}],
            "triggers": [trigger]}  # fmt: skip


def test_a_special_token_trigger_is_that_token_written_by_its_id(qwen: Tokens) -> None:
    compiler = LlguidanceCompiler(qwen)
    call = qwen.tokenizer.convert_tokens_to_ids("<tool_call>")
    end = qwen.tokenizer.convert_tokens_to_ids("</tool_call>")
    assert (call, end) == (248058, 248059)
    by_name = compiler.compile(_spec(_hermes("<tool_call>")))
    by_id = compiler.compile(_spec(_hermes("<[248058]>")))
    assert "<tool_call>" in by_name.grammar_text and "<[248058]>" in by_id.grammar_text
    for grammar in (by_name, by_id):
        assert any("special token 248058 (<[248058]>)" in w for w in grammar.warnings)
        assert any("special token 248059 (<[248059]>)" in w and "refused" in w
                   for w in grammar.warnings)  # fmt: skip
        text = qwen.encode("Sunny.\n")
        # The token fires the trigger: then the begin is forced, nothing else.
        walked = replay(grammar, qwen, token_ids=[*text, call, *qwen.encode('\n{"name')])
        assert walked.accepted, grammar.grammar_text
        before, after = walked.tokens[len(text)], walked.tokens[len(text) + 1]
        assert before.allowed_count > qwen.vocab_size // 2 and after.allowed_count < 10
        # The same text spelled in pieces is free text: it fires nothing.
        pieces = qwen.encode("<tool") + qwen.encode("_call>")
        assert call not in pieces
        walked = replay(grammar, qwen, token_ids=[*text, *pieces, *qwen.encode("\nhi")])
        assert walked.accepted and walked.tokens[-1].allowed_count > qwen.vocab_size // 2
        # The end is quoted text, so the model's own </tool_call> token is refused there.
        masking = new_masking(grammar)
        args = qwen.encode('\n{"name": "weather", "arguments": {"city": "Oslo"}}\n')
        assert all(masking.accept_token(t) for t in [*text, call, *args])
        assert not masking.probe_token(end)
        spelled = qwen.encode("</tool") + qwen.encode("_call>")
        assert end not in spelled and all(masking.accept_token(t) for t in spelled)
        assert masking.is_completed()


def test_a_trigger_named_like_a_token_qwen_lacks_says_to_write_its_id(qwen: Tokens) -> None:
    with pytest.raises(GrammarError) as caught:
        LlguidanceCompiler(qwen).compile(_spec(_hermes("<tool_calls>")))
    assert caught.value.pointer == "/triggers/0" and "<[id]>" in caught.value.message
