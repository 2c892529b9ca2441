"""The GGUF block kernel (``MASKSCOPE_CPU_MATMUL``): the shipped default on this machine's CPU,
and it records float32's probabilities (within 1e-3) on the examples, on the real model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from app.engine import Engine
from app.engine.gguf_matmul import MAX_KERNEL_ROWS, BlockLinear, GgufMatmulError, Kernels
from app.engine.model import checkpoint_source, gguf_matmul_wanted, use_embedded_gguf_blocks
from app.examples import load_examples
from app.exceptions import ModelLoadError
from app.settings import Settings

STEPS = 6  # one-token steps per example: each runs every layer through the kernel
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def float32_model() -> Any:
    """The embedded model as torch's float32 matmuls run it: the reference."""
    return AutoModelForCausalLM.from_pretrained(checkpoint_source(Settings())).eval()


def _block_layers(model: torch.nn.Module) -> list[BlockLinear]:
    return [m for m in model.modules() if isinstance(m, BlockLinear)]


def test_the_engine_runs_the_gguf_blocks_where_auto_picks_them(engine: Engine) -> None:
    model = engine.model.model
    if not gguf_matmul_wanted(Settings(), CPU, torch.float32) or engine.model.device != CPU:
        pytest.skip("cpu_matmul=auto picks float32 here (more than 2 torch threads, or a GPU)")
    layers = _block_layers(model)
    assert len(layers) == 30 * 7 + 1  # every decoder projection, and the head
    assert model.lm_head in layers
    # The head still shares its float32 weight with the embeddings (tied).
    assert model.lm_head.weight is model.model.embed_tokens.weight


@torch.inference_mode()
def _decode(model: torch.nn.Module, prompt: list[int], forced: list[int]) -> list[torch.Tensor]:
    cache = DynamicCache(config=model.config)
    out = model(input_ids=torch.tensor([prompt]), cache=cache, logits_to_keep=1)
    probabilities = []
    for token in forced:
        probabilities.append(torch.softmax(out.logits[0, -1].float(), -1))
        out = model(input_ids=torch.tensor([[token]]), cache=cache, logits_to_keep=1)
    probabilities.append(torch.softmax(out.logits[0, -1].float(), -1))
    return probabilities


def test_the_blocks_record_float32s_probabilities_on_the_examples(
    engine: Engine, float32_model: Any
) -> None:
    model = engine.model.model
    if not _block_layers(model):
        pytest.skip("the engine runs torch's float32 matmuls here")
    tokens = engine.model.tokens
    worst = 0.0
    for example in load_examples():
        text = tokens.tokenizer.apply_chat_template(
            [
                {"role": "system", "content": example.system},
                {"role": "user", "content": example.prompt},
            ],
            add_generation_prompt=True,
            tokenize=False,
        )
        prompt = list(tokens.encode(text))
        with torch.inference_mode():  # float32's greedy tokens, fed to both
            greedy = float32_model.generate(
                torch.tensor([prompt]), max_new_tokens=STEPS, do_sample=False
            )[0, len(prompt) :].tolist()
        reference = _decode(float32_model, prompt, greedy)
        blocks = _decode(model, prompt, greedy)
        worst = max(
            worst, *(float((a - b).abs().max()) for a, b in zip(reference, blocks, strict=True))
        )
    assert worst <= 1e-3
    assert worst > 0.0  # the kernel ran: its sums' order is not torch's


def test_a_block_layer_agrees_with_its_float32_weight_at_every_row_count(engine: Engine) -> None:
    layers = _block_layers(engine.model.model)
    if not layers:
        pytest.skip("the engine runs torch's float32 matmuls here")
    generator = torch.Generator().manual_seed(0)
    for layer in (layers[0], layers[6], layers[-1]):  # q (Q4_1), down (Q4_1), head (Q8_0)
        for rows in (1, 3, MAX_KERNEL_ROWS, MAX_KERNEL_ROWS + 1):
            x = torch.randn(rows, 1, layer.in_features, generator=generator)
            with torch.inference_mode():
                got = layer(x)
                want = torch.nn.functional.linear(x.double(), layer.weight.double()).float()
            assert got.shape == (rows, 1, layer.out_features)
            scale = float(want.abs().max())
            assert float((got - want).abs().max()) <= 1e-5 * scale
            if rows > MAX_KERNEL_ROWS:  # torch's own matmul, bit for bit
                assert torch.equal(got, torch.nn.functional.linear(x, layer.weight))
        with torch.inference_mode():
            together = layer(x[:3])
            alone = torch.cat([layer(x[i : i + 1]) for i in range(3)])
        assert torch.equal(together, alone)  # a row's result does not depend on its batch


def test_a_weight_the_blocks_do_not_make_leaves_the_model_as_it_was(
    float32_model: Any, tmp_path: Path
) -> None:
    model = AutoModelForCausalLM.from_pretrained(checkpoint_source(Settings())).eval()
    down = model.model.layers[29].mlp.down_proj
    with torch.no_grad():
        down.weight[0, 0] = torch.nextafter(down.weight[0, 0], torch.tensor(1.0))
    strict = Settings(cpu_matmul="gguf", cache_dir=tmp_path)
    with pytest.raises(ModelLoadError, match=r"blk\.29\.ffn_down\.weight: the blocks do not"):
        use_embedded_gguf_blocks(model, strict)
    assert not _block_layers(model)  # all or nothing
    assert not use_embedded_gguf_blocks(model, Settings(cpu_matmul="auto", cache_dir=tmp_path))
    assert not _block_layers(model)


def test_without_a_compiler_auto_falls_back_and_gguf_refuses(
    float32_model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(GgufMatmulError, match="building the GGUF block kernel failed"):
        Kernels.build(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(checkpoint_source(Settings())).eval()
    assert not use_embedded_gguf_blocks(model, Settings(cpu_matmul="auto", cache_dir=tmp_path))
    with pytest.raises(ModelLoadError, match="MASKSCOPE_CPU_MATMUL=gguf: building"):
        use_embedded_gguf_blocks(model, Settings(cpu_matmul="gguf", cache_dir=tmp_path))
    assert not _block_layers(model)


def test_which_models_and_devices_may_have_the_blocks() -> None:
    assert not gguf_matmul_wanted(Settings(cpu_matmul="float32"), CPU, torch.float32)
    assert not gguf_matmul_wanted(Settings(model="some/model"), CPU, torch.float32)
    assert not gguf_matmul_wanted(Settings(), torch.device("cuda"), torch.bfloat16)
    with pytest.raises(ModelLoadError, match="only the embedded model"):
        gguf_matmul_wanted(Settings(model="some/model", cpu_matmul="gguf"), CPU, torch.float32)
    with pytest.raises(ModelLoadError, match="float32 on cpu"):
        gguf_matmul_wanted(Settings(cpu_matmul="gguf"), CPU, torch.bfloat16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert gguf_matmul_wanted(Settings(), CPU, torch.float32)
        torch.set_num_threads(3)
        assert not gguf_matmul_wanted(Settings(), CPU, torch.float32)  # auto: float32's threads
        assert gguf_matmul_wanted(Settings(cpu_matmul="gguf"), CPU, torch.float32)
    finally:
        torch.set_num_threads(before)
