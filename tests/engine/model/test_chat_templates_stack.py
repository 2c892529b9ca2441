"""Chat templates a serving stack renders: DeepSeek V4 publishes no Jinja template, so its prompt
is the one vLLM's own encoder writes (``--tokenizer-mode deepseek_v4``), rendered in the stack's
runner. Both shipped stacks (vLLM 0.32.0's ``.venv-vllm``, and the 0.34.0 wheel layered over it,
``make stacks``) and the real DeepSeek V4 tokenizer."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine
from app.engine.factories.tokenizer_only import TokenizerModel
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.model.chat_templates import (
    ChatTemplate,
    in_stack,
    option_counts,
    render,
    template_for,
)
from app.engine.stacks import runner
from app.exceptions import GrammarError, InvalidInput
from app.settings import Settings
from tests.vllm_oracle import STACK_PATHS, VLLM_PYTHON

pytestmark = pytest.mark.server  # vLLM's runners: real processes

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def settings() -> Settings:
    tmp = Path(tempfile.mkdtemp(prefix="templates-"))
    return Settings(
        db_path=tmp / "p.db",
        compile_workers=1,
        vllm_python=VLLM_PYTHON,
        vllm_timeout_s=600,
        stacks_dir=STACK_PATHS["vllm-0.34.0"][0].parent,
    )


@pytest.fixture(scope="module", params=list(STACK_PATHS))
def builder(settings: Settings, request: pytest.FixtureRequest) -> VllmBuilder:
    return runner(settings, request.param)


def test_the_stack_lists_its_deepseek_encoders_from_its_own_registry(
    builder: VllmBuilder,
) -> None:
    encoders = builder.encoders()
    # vLLM 0.32.0 and 0.34.0 register DeepSeek V3.2, V4 and V4.1 modes with a Python encoder
    assert {"deepseek_v32", "deepseek_v4", "deepseek_v41"} <= set(encoders)
    assert "hf" not in encoders  # the plain tokenizer renders with Jinja
    v4 = encoders["deepseek_v4"]
    assert v4["encoder"] == "vllm.tokenizers.deepseek_v4_encoding.encode_messages"
    assert v4["renderer"].endswith("DeepseekV4Renderer")


def test_deepseek_v4_renders_with_the_stacks_encoder(
    deepseek: Engine[TokenizerModel], builder: VllmBuilder
) -> None:
    tokens = deepseek.model.tokens
    unbound = template_for(tokens, shipped="deepseek-v4")
    assert (unbound.origin, unbound.text, unbound.mode) == ("stack", None, "deepseek_v4")
    with pytest.raises(InvalidInput) as caught:
        render(unbound, tokens, MESSAGES)  # no stack to render in
    assert caught.value.pointer == "/stack"
    template = in_stack(unbound, builder, deepseek.tools.tokenizer)
    assert "deepseek_v4_encoding.encode_messages" in template.source
    version = builder.versions()["vllm"]
    assert builder.render(
        deepseek.tools.tokenizer, MESSAGES, tokenizer_mode="deepseek_v4"
    ).rendered_by.startswith(
        f"vllm.tokenizers.deepseek_v4_encoding.encode_messages (vLLM {version}"
    )
    thinking = render(template, tokens, MESSAGES, tools=[WEATHER], enable_thinking=True)
    assert thinking.text.startswith("<｜begin▁of▁sentence｜>")
    assert thinking.text.endswith("<｜User｜>Weather in Paris?<｜Assistant｜><think>")
    assert '"name": "get_weather"' in thinking.text and "｜DSML｜tool_calls" in thinking.text
    assert thinking.tokens == len(tokens.encode(thinking.text))
    chat = render(template, tokens, MESSAGES, tools=[WEATHER], enable_thinking=False)
    assert chat.text.endswith("<｜Assistant｜></think>")
    counts = {c.option: c for c in option_counts(template, tokens, MESSAGES, [WEATHER])}
    assert counts["tool_choice"].changes and counts["reasoning"].changes


def test_a_mode_the_stack_has_no_encoder_for_is_refused_at_the_stack(
    deepseek: Engine[TokenizerModel], builder: VllmBuilder
) -> None:
    unknown = ChatTemplate(None, "stack", "a mode of no release", mode="deepseek_v9")
    with pytest.raises(InvalidInput) as caught:
        in_stack(unknown, builder, deepseek.tools.tokenizer)
    assert caught.value.pointer == "/stack" and "deepseek_v4" in caught.value.message
    with pytest.raises(GrammarError) as refused:
        builder.render(deepseek.tools.tokenizer, MESSAGES, tokenizer_mode="deepseek_v9")
    assert "deepseek_v9" in refused.value.message
