"""The reasoning boundary on the real default model, real xgrammar and llguidance: each mode, the
token that straddles the end marker, a prompt that already closed the thinking, an implicit end
on a tool-call token, a replay of a call after reasoning; vLLM's end marker on a production
tokenizer where it is one token."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr

from app.engine import Engine, GrammarKind, GrammarSpec, Session
from app.engine.grammars.reasoning import EndMarker, ReasoningGate, ReasoningMode, reasoning_end
from app.engine.grammars.spec import CompileResult
from app.engine.mask import count_allowed, words_from_bytes
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.engine.stepper.replay import replay
from app.engine.tokens import Tokens
from app.exceptions import InvalidInput
from tests.vllm_oracle import VLLM_PYTHON

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def qwen_tag(reasoning: str) -> str:
    """xgrammar's own Qwen 3 tag for one tool."""
    tag = xgr.get_model_structural_tag("qwen_3", tools=TOOLS, reasoning=reasoning)
    return str(tag.model_dump_json())


def spec(source: str) -> GrammarSpec:
    return GrammarSpec(GrammarKind.STRUCTURAL_TAG, source)


def force_text(session: Session, text: str) -> None:
    for token_id in session.model.tokens.encode(text):
        session.force(token_id)


def test_the_end_marker_is_read_from_the_tag(engine: Engine) -> None:
    assert reasoning_end(engine.compile(spec(qwen_tag("enabled")))) == "</think>"
    assert reasoning_end(engine.compile(spec(qwen_tag("disabled")))) is None


def test_mask_after_end_leaves_the_reasoning_unmasked_then_masks(engine: Engine) -> None:
    session = engine.new_session(
        spec(qwen_tag("enabled")), raw_prompt=PROMPT, reasoning=ReasoningMode.MASK_AFTER_END
    )
    vocab = session.model.tokens.vocab_size
    force_text(session, "The user wants weather.")
    session.step()  # a free step: nothing masks it
    if session.done:  # the model may end there, unconstrained
        session.back(1)
    force_text(session, "</think>")
    reasoning_steps = list(session.steps)
    assert all(not s.masked for s in reasoning_steps)
    for step in reasoning_steps:
        assert step.allowed_count == vocab
        assert count_allowed(_words(step.bitmask), vocab) == vocab
        assert step.blocked_mass == 0.0 and step.rules == () and step.probe.checked == 0
        assert step.segment is not None and step.segment.kind == "reasoning"
    after = session.step()  # the tag's "\n\n" after </think> is forced
    assert after.masked and after.allowed_count < 100
    assert session.model.tokens.text(after.token_id).startswith("\n")


def test_none_and_mask_everywhere_mask_from_token_zero(engine: Engine) -> None:
    for mode in (ReasoningMode.NONE, ReasoningMode.MASK_EVERYWHERE):
        session = engine.new_session(spec(qwen_tag("enabled")), raw_prompt=PROMPT, reasoning=mode)
        first = session.step()
        assert first.masked and first.segment is not None and first.segment.kind == "reasoning"
        # the reasoning-aware tag's free text excludes "<think>": the mask blocks something
        assert first.allowed_count < session.model.tokens.vocab_size


def test_the_straddling_token_feeds_the_bytes_after_the_marker(engine: Engine) -> None:
    """``></`` closes ``</think`` and starts ``</``: the grammar gets ``</``."""
    tokens = engine.model.tokens
    straddle = tokens.encode("></")
    assert len(straddle) == 1, "the default model has a single ></ token"
    free_after = json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "tag", "begin": "</", "content": {"type": "any_text"}, "end": "!"}]}})  # fmt: skip
    session = engine.new_session(
        spec(free_after), raw_prompt=PROMPT, reasoning=ReasoningMode.MASK_AFTER_END
    )
    force_text(session, "ok </think")
    record = session.force(straddle[0])
    assert not record.masked and session.stop_reason is None
    nxt = session.step()
    assert nxt.masked  # "</" was fed: the grammar is inside the second tag now
    assert session.text.startswith("ok </think></")
    session.back(2)  # rolling the boundary back leaves the matcher where it was
    assert session.force(straddle[0]).without_timings() == record.without_timings()

    refused = engine.new_session(
        spec(qwen_tag("enabled")), raw_prompt=PROMPT, reasoning=ReasoningMode.MASK_AFTER_END
    )
    force_text(refused, "ok </think")
    last = refused.force(straddle[0])  # the tag wants "\n\n" after </think>, not "</"
    assert not last.masked and refused.stop_reason is not None
    assert refused.stop_reason.value == "rejected"


def test_a_prompt_that_closed_the_thinking_is_masked_from_token_zero(engine: Engine) -> None:
    closed = PROMPT + "\n</think>\n\n"
    session = engine.new_session(
        spec(qwen_tag("enabled")), raw_prompt=closed, reasoning=ReasoningMode.MASK_AFTER_END
    )
    assert session.reasoning.closed_in_prompt
    first = session.step()
    assert first.masked and first.allowed_count < session.model.tokens.vocab_size
    assert first.segment is not None and first.segment.kind == "text"  # past the reasoning
    still_open = engine.new_session(
        spec(qwen_tag("enabled")), raw_prompt=PROMPT, reasoning=ReasoningMode.MASK_AFTER_END
    )
    assert not still_open.step().masked


def test_the_implicit_end_on_a_tool_call_token_feeds_the_marker(engine: Engine) -> None:
    """As vLLM's k2_horizon / gemma4 / mistral parsers: the tool-call start ends the reasoning
    and is content (fed to the grammar); the tag is built without reasoning (vLLM's way)."""
    compiled = engine.compile(spec(qwen_tag("disabled")))
    gate = ReasoningGate(
        ReasoningMode.MASK_AFTER_END, (EndMarker("</think>"), EndMarker("<tool_call>", True))
    )
    session = engine.new_session(compiled, raw_prompt=PROMPT, reasoning=gate)
    force_text(session, "I will call it. <tool_call>")
    assert all(not s.masked for s in session.steps) and session.stop_reason is None
    nxt = session.step()  # after "<tool_call>" the begin forces "\n"
    assert nxt.masked and session.model.tokens.text(nxt.token_id).startswith("\n")
    assert nxt.segment is not None and nxt.segment.kind == "tag_begin"


def test_mask_after_end_needs_a_marker(engine: Engine) -> None:
    with pytest.raises(InvalidInput, match="needs an end marker"):
        engine.new_session(
            spec(qwen_tag("disabled")), raw_prompt=PROMPT, reasoning=ReasoningMode.MASK_AFTER_END
        )


def test_replay_of_a_call_after_reasoning(engine: Engine) -> None:
    text = "Paris, so get_weather.</think>\n\n" + CALL
    compiled = engine.compile(spec(qwen_tag("enabled")))
    gated = engine.replay(compiled, text=text, reasoning=ReasoningMode.MASK_AFTER_END)
    assert gated.accepted and gated.complete
    tokens = engine.model.tokens
    ends = _ends(tokens, text)
    boundary = text.find("</think>") + len("</think>")
    for token, end in zip(gated.tokens, ends, strict=True):
        start = end - len(token.text)
        assert token.masked == (start >= boundary), (start, token.text)
        if not token.masked:
            assert token.allowed_count == tokens.vocab_size
    plain = engine.replay(compiled, text=text)  # the tag's own reasoning block: masked throughout
    assert plain.accepted and all(t.masked for t in plain.tokens)


def test_replay_rejects_what_the_grammar_refuses_after_the_marker(engine: Engine) -> None:
    text = "Paris.</think>\n\nnot a call"
    compiled = engine.compile(spec(qwen_tag("enabled")))
    result = engine.replay(compiled, text=text, reasoning=ReasoningMode.MASK_AFTER_END)
    assert result.accepted  # free text is allowed after the reasoning with tool_choice auto
    required = xgr.get_model_structural_tag(
        "qwen_3", tools=TOOLS, tool_choice="required", reasoning="enabled"
    ).model_dump_json()
    refused = engine.replay(
        engine.compile(spec(required)), text=text, reasoning=ReasoningMode.MASK_AFTER_END
    )
    assert not refused.accepted and refused.rejection is not None
    assert refused.rejection.offset == text.find("not")


@pytest.fixture(scope="module")
def qwen36(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokens, tuple[EndMarker, ...]]:
    """The Qwen3.6 tokenizer, and the end markers vLLM's ``qwen3`` reasoning parser reports on
    it (read from vLLM's own code: its end token ids, the explicit one and the content ones)."""
    assert VLLM_PYTHON.exists(), (
        f"{VLLM_PYTHON} is missing: run `make vllm-install` (`make test` does)"
    )
    from transformers import AutoTokenizer

    directory = tokenizer_dir("qwen3.6", tmp_path_factory.mktemp("tokenizers"))
    hf = AutoTokenizer.from_pretrained(directory)
    tokens = Tokens.from_tokenizer(hf, len(hf), [hf.eos_token_id])
    return tokens, _vllm_markers("qwen3", directory)


@pytest.mark.server  # vLLM's own code, run in .venv-vllm: the server tier
def test_vllm_end_markers_on_a_production_tokenizer(
    qwen36: tuple[Tokens, tuple[EndMarker, ...]],
) -> None:
    """On Qwen3.6 ``</think>`` is one token; vLLM ends the reasoning there, and a replay of
    token ids finds it at text level: masked from the next token on."""
    tokens, markers = qwen36
    assert EndMarker("</think>") in markers
    compiled = _compile_tag(tokens, qwen_tag("disabled"))  # vLLM builds with reasoning=False
    hf = tokens.tokenizer
    ids = [*hf.encode("Let me check.", add_special_tokens=False), 248069]
    ids += hf.encode("\n\n" + CALL, add_special_tokens=False)
    gate = ReasoningGate(ReasoningMode.MASK_AFTER_END, markers)
    result = replay(compiled, tokens, token_ids=ids, reasoning=gate)
    assert result.accepted and result.complete
    masked = [t.masked for t in result.tokens]
    assert masked.index(True) == ids.index(248069) + 1 and all(masked[masked.index(True) :])
    everywhere = replay(compiled, tokens, token_ids=ids)  # the #46149 case: masked from token 0
    assert not everywhere.accepted


@pytest.mark.server  # vLLM's own code, run in .venv-vllm: the server tier
def test_qwen3_reasoning_ends_implicitly_on_the_tool_call_token(
    qwen36: tuple[Tokens, tuple[EndMarker, ...]],
) -> None:
    """vLLM's qwen3 parser also ends the reasoning on ``<tool_call>`` (248058), which is
    content: unmasked itself, fed to the grammar, and the call after it masked."""
    tokens, markers = qwen36
    assert EndMarker("<tool_call>", content=True) in markers
    compiled = _compile_tag(tokens, qwen_tag("disabled"))
    hf = tokens.tokenizer
    ids = [*hf.encode("I should call the tool.", add_special_tokens=False), 248058]
    ids += hf.encode(CALL.removeprefix("<tool_call>"), add_special_tokens=False)
    gate = ReasoningGate(ReasoningMode.MASK_AFTER_END, markers)
    result = replay(compiled, tokens, token_ids=ids, reasoning=gate)
    assert result.accepted and result.complete
    call = ids.index(248058)
    assert [t.masked for t in result.tokens] == [i > call for i in range(len(ids))]
    segment = result.tokens[call + 1].segment
    assert segment is not None and segment.kind == "tag_begin"


def _vllm_markers(parser: str, tokenizer: Path) -> tuple[EndMarker, ...]:
    code = (
        "import json, sys; from transformers import AutoTokenizer;"
        "from vllm.reasoning import ReasoningParserManager as M;"
        "t = AutoTokenizer.from_pretrained(sys.argv[2]);"
        "p = M.get_reasoning_parser(sys.argv[1])(t); e = p._parser_engine;"
        "print(json.dumps([[t.convert_ids_to_tokens(i), i != e._reasoning_end_token_id]"
        " for i in sorted(p.reasoning_end_token_ids)]))"
    )
    answer = subprocess.run(
        [str(VLLM_PYTHON), "-c", code, parser, str(tokenizer)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    pairs = json.loads(answer.stdout.strip().splitlines()[-1])
    return tuple(EndMarker(text, content) for text, content in pairs)


def _compile_tag(tokens: Tokens, tag: str) -> CompileResult:
    compiler = xgr.GrammarCompiler(tokens.info)
    compiled = compiler.compile_structural_tag(tag)
    return CompileResult(spec(tag), compiled, str(compiled.grammar), (), (), 0.0, 0)


def _words(bitmask: bytes) -> Any:
    import torch

    return torch.from_numpy(words_from_bytes(bitmask).copy())


def _ends(tokens: Tokens, text: str) -> list[int]:
    """The character offset just past each token of ``text``, from the decoded prefixes."""
    ids = tokens.encode(text)
    return [len(tokens.tokenizer.decode(ids[: i + 1])) for i in range(len(ids))]
