"""The GGUF block kernel (``MASKSCOPE_CPU_MATMUL``) on the embedded model: the shipped default
on this machine's CPU, and it records float32's probabilities (within 1e-3) on the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer

from app.engine import Engine
from app.engine.kernels import gguf as gguf_kernels
from app.engine.kernels.gguf import (
    MAX_KERNEL_ROWS,
    BlockLinear,
    Decoder,
    GgufMatmulError,
    Kernels,
    kernel_variants,
)
from app.engine.model.forward.batch import Batcher, GrowingLayer, _Row
from app.engine.model.loading import checkpoint_source, gguf_matmul_wanted, use_embedded_gguf_blocks
from app.examples import load_examples
from app.exceptions import ModelLoadError
from app.settings import Settings

#: Every test here runs (or compares against) the real model: the fast tier's kernel tests are
#: test_tiny_llama.py's.
pytestmark = pytest.mark.model

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
    if engine.model.kernels is None:  # no vector build for this CPU: auto keeps float32
        assert not layers and Kernels.load().isa == "portable"
        return
    flags = set(next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags")).split())  # fmt: skip
    assert engine.model.kernels.isa == ("avx512" if "avx512f" in flags else "avx2")
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


@pytest.fixture(scope="module")
def float32_traces(engine: Engine, float32_model: Any) -> list[tuple[list[int], list[int], Any]]:
    """Each example's prompt, float32's greedy tokens after it, and float32's probabilities
    before each of those tokens and after the last."""
    tokens = engine.model.tokens
    traces = []
    for example in load_examples():
        text = tokens.tokenizer.apply_chat_template(
            [{"role": "system", "content": example.system},
             {"role": "user", "content": example.prompt}],
            add_generation_prompt=True, tokenize=False,
        )  # fmt: skip
        prompt = list(tokens.encode(text))
        with torch.inference_mode():
            greedy = float32_model.generate(
                torch.tensor([prompt]), max_new_tokens=STEPS, do_sample=False
            )[0, len(prompt) :].tolist()
        traces.append((prompt, greedy, _decode(float32_model, prompt, greedy)))
    return traces


def test_the_blocks_record_float32s_probabilities_on_the_examples(
    engine: Engine, float32_traces: list[tuple[list[int], list[int], Any]]
) -> None:
    model = engine.model.model
    if not _block_layers(model):
        pytest.skip("the engine runs torch's float32 matmuls here")
    worst = 0.0
    for prompt, greedy, reference in float32_traces:  # float32's greedy tokens, fed to both
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


def test_auto_keeps_float32_where_the_kernel_has_no_vector_build(tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(checkpoint_source(Settings())).eval()
    auto, gguf = (Settings(cpu_matmul=wanted, cache_dir=tmp_path) for wanted in ("auto", "gguf"))
    assert use_embedded_gguf_blocks(model, auto, variant="portable") is None
    assert not _block_layers(model)
    kernels = use_embedded_gguf_blocks(model, gguf, variant="portable")
    assert kernels is not None and kernels.isa == "portable"
    assert len(_block_layers(model)) == 30 * 7 + 1


def test_without_the_built_kernel_auto_falls_back_and_gguf_refuses(
    float32_model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_kernels, "LIBRARY_DIR", tmp_path)  # an install that built no kernel
    with pytest.raises(GgufMatmulError, match="the GGUF kernel is not built"):
        Kernels.load()
    model = AutoModelForCausalLM.from_pretrained(checkpoint_source(Settings())).eval()
    assert not use_embedded_gguf_blocks(model, Settings(cpu_matmul="auto", cache_dir=tmp_path))
    with pytest.raises(ModelLoadError, match="MASKSCOPE_CPU_MATMUL=gguf: the GGUF kernel is not"):
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


@pytest.fixture(scope="module")
def kernel_builds() -> dict[str, Kernels]:
    """Every build of the kernels this CPU runs (built at install): its best, and those other
    CPUs run (AVX2, where this one has AVX-512; portable C everywhere)."""
    return {variant: Kernels.load(variant) for variant in kernel_variants()}


def test_the_kernels_make_each_weight_exactly(
    engine: Engine, kernel_builds: dict[str, Kernels]
) -> None:
    layers = _block_layers(engine.model.model)
    if not layers:
        pytest.skip("the engine runs torch's float32 matmuls here")
    for layer in (layers[0], layers[-1]):  # Q4_1, Q8_0
        blocks = layer._blocks
        columns = [0, 31, 32, layer.in_features - 1, 100, 200, 300, 400]
        x = torch.zeros(MAX_KERNEL_ROWS, layer.in_features)
        x[range(MAX_KERNEL_ROWS), columns] = 1.0  # row r picks weight column columns[r]
        for build, kernels in kernel_builds.items():
            out = torch.empty(MAX_KERNEL_ROWS, layer.out_features)
            (kernels.q41 if blocks.mins is not None else kernels.q80)(x, blocks, out)
            # + 0.0: -0.0 sums to 0.0
            assert torch.equal(out, layer.weight[:, columns].T + 0.0), build


def test_the_portable_kernels_agree_with_this_cpus(
    engine: Engine, kernel_builds: dict[str, Kernels]
) -> None:
    layers = _block_layers(engine.model.model)
    if not layers:
        pytest.skip("the engine runs torch's float32 matmuls here")
    generator = torch.Generator().manual_seed(1)
    for layer in (layers[6], layers[-1]):
        blocks = layer._blocks
        x = torch.randn(5, layer.in_features, generator=generator)
        outs = {}
        for build, kernels in kernel_builds.items():
            out = outs[build] = torch.empty(5, layer.out_features)
            (kernels.q41 if blocks.mins is not None else kernels.q80)(x, blocks, out)
            for row in (0, 4):  # a row's sums do not depend on its batch, nor its place in it
                alone = torch.empty(1, layer.out_features)
                (kernels.q41 if blocks.mins is not None else kernels.q80)(
                    x[row : row + 1], blocks, alone
                )
                assert torch.equal(alone[0], out[row]), build
        want = torch.nn.functional.linear(x.double(), layer.weight.detach().double())
        for out in outs.values():
            assert float((out - want).abs().max()) <= 1e-5 * float(want.abs().max())


@pytest.mark.parametrize("length", [1, 5, 7, 8, 16, 17, 300])
def test_the_attention_kernel_computes_what_sdpa_does(
    kernel_builds: dict[str, Kernels], length: int
) -> None:
    generator = torch.Generator().manual_seed(length)
    query = 3 * torch.randn(1, 9, 1, 64, generator=generator)
    # Views of a longer cache, as a growing layer hands them out; 3 heads of keys for 9 queries.
    keys = torch.randn(1, 3, length + 40, 64, generator=generator)[:, :, :length]
    values = torch.randn(1, 3, length + 40, 64, generator=generator)[:, :, :length]
    builds = {build: kernels.attend(query, keys, values, 0.125) for build, kernels in
              kernel_builds.items()}  # fmt: skip
    exact = torch.nn.functional.scaled_dot_product_attention(
        query.double(),
        keys.double().repeat_interleave(3, dim=1),
        values.double().repeat_interleave(3, dim=1),
        scale=0.125,
    ).transpose(1, 2)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        query, keys.repeat_interleave(3, dim=1), values.repeat_interleave(3, dim=1), scale=0.125
    ).transpose(1, 2)
    sdpa_error = float((sdpa - exact).abs().max())
    for build, got in builds.items():
        assert got is not None and got.shape == (1, 1, 9, 64), build
        assert float((got - exact).abs().max()) <= max(4 * sdpa_error, 1e-6), build


def test_the_attention_kernel_declines_what_it_does_not_compute(
    kernel_builds: dict[str, Kernels],
) -> None:
    attend = Kernels.load().attend
    q, k = torch.randn(1, 4, 1, 64), torch.randn(1, 2, 7, 64)
    assert attend(q, k, k, 0.1) is not None
    assert attend(torch.randn(1, 4, 2, 64), k, k, 0.1) is None  # two query tokens: a prompt's
    assert attend(q.double(), k.double(), k.double(), 0.1) is None
    assert (
        attend(torch.randn(1, 4, 1, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8), 0.1)
        is None
    )
    assert attend(torch.randn(1, 3, 1, 64), k, k, 0.1) is None  # 3 query heads on 2 key heads
    assert attend(q, k.transpose(2, 3).contiguous().transpose(2, 3), k, 0.1) is None


def _three_prompts(batcher: Batcher) -> list[DynamicCache]:
    """Three caches holding prompts of three lengths (30, 37 and 44 tokens)."""
    caches = [batcher.new_cache() for _ in range(3)]
    for i, cache in enumerate(caches):
        batcher.prefill(cache, list(range(100, 130 + 7 * i)))
    return caches


def test_one_token_steps_attend_through_the_kernel_alone_and_batched(engine: Engine) -> None:
    model = engine.model
    if model.kernels is None:
        pytest.skip("the engine runs torch's float32 matmuls here")
    kernels, layers = model.kernels, model.model.config.num_hidden_layers
    answered: list[bool] = []

    def attend(*args: Any) -> torch.Tensor | None:
        out = kernels.attend(*args)
        answered.append(out is not None)
        return out

    batchers = {
        "kernel": Batcher(model.model, device=CPU, lock=model.lock, attend=attend,
                          prompt_cache_bytes=0),
        "sdpa": Batcher(model.model, device=CPU, lock=model.lock, prompt_cache_bytes=0),
    }  # fmt: skip
    logits: dict[str, list[torch.Tensor]] = {}
    for name, batcher in batchers.items():
        caches = _three_prompts(batcher)
        if name == "kernel":
            assert answered == []  # a prompt attends through sdpa
        alone = batcher.step(caches[0], 5)
        if name == "kernel":
            assert answered == [True] * layers
        with torch.inference_mode():
            together = batcher._forward([_Row(cache, 7) for cache in caches])
        logits[name] = [alone, *together]
    assert answered == [True] * layers * 4
    for got, want in zip(logits["kernel"], logits["sdpa"], strict=True):
        assert float((got - want).abs().max()) <= 1e-3
        assert int(got.argmax()) == int(want.argmax())


def test_a_batchs_attention_in_one_call_is_the_row_by_row_one_bit_for_bit(
    engine: Engine,
) -> None:
    model = engine.model
    if model.kernels is None:
        pytest.skip("the engine runs torch's float32 matmuls here")
    kernels, layers = model.kernels, model.model.config.num_hidden_layers
    calls: list[bool] = []

    def attend_rows(*args: Any) -> torch.Tensor | None:
        out = kernels.attend_rows(*args)
        calls.append(out is not None)
        return out

    batchers = {
        "one call": Batcher(model.model, device=CPU, lock=model.lock, attend=kernels.attend,
                            attend_rows=attend_rows, prompt_cache_bytes=0),
        "row by row": Batcher(model.model, device=CPU, lock=model.lock, attend=kernels.attend,
                              prompt_cache_bytes=0),
    }  # fmt: skip
    results: dict[str, list[torch.Tensor]] = {}
    for name, batcher in batchers.items():
        caches = _three_prompts(batcher)
        first = caches[0].layers[0]
        assert isinstance(first, GrowingLayer) and first._buffers is not None
        # Row 0's buffers full to the last place: its first step must grow them.
        for layer in caches[0].layers:
            layer._buffers = (layer.keys.clone(), layer.values.clone())
            layer.keys, layer.values = layer._buffers
        logits: list[torch.Tensor] = []
        with torch.inference_mode():
            for step in range(3):
                logits += batcher._forward([_Row(cache, 7 + step) for cache in caches])
        results[name] = logits + [t for cache in caches for layer in cache.layers
                               for t in (layer.keys, layer.values)]  # fmt: skip
    assert calls == [True] * layers * 3
    for got, want in zip(results["one call"], results["row by row"], strict=True):
        assert torch.equal(got, want)


class _Counted:
    """A decoder that counts the batches it decoded (and declines none)."""

    def __init__(self, decoder: Decoder) -> None:
        self._decoder = decoder
        self.layers, self.template = decoder.layers, decoder.template
        self.rows: list[int] = []

    def decode(self, token_ids: Any, slots: Any) -> torch.Tensor | None:
        out = self._decoder.decode(token_ids, slots)
        assert out is not None
        self.rows.append(len(token_ids))
        return out


def _decoder_batcher(engine: Engine, kernels: Kernels | None = None) -> tuple[Batcher, _Counted]:
    model = engine.model
    assert model.kernels is not None
    decoder = Decoder.of(model.model, kernels or model.kernels)
    assert decoder is not None
    counted = _Counted(decoder)
    batcher = Batcher(model.model, device=CPU, lock=model.lock, attend=model.kernels.attend,
                      decoder=counted, prompt_cache_bytes=0)  # type: ignore[arg-type]  # fmt: skip
    return batcher, counted


def test_the_engine_decodes_its_steps_in_one_call(engine: Engine) -> None:
    if engine.model.kernels is None:
        pytest.skip("the engine runs torch's float32 matmuls here")
    assert isinstance(engine.model.batcher._decoder, Decoder)


def test_the_decoder_records_float32s_probabilities_on_the_examples(
    engine: Engine, float32_traces: list[tuple[list[int], list[int], Any]]
) -> None:
    if engine.model.kernels is None:
        pytest.skip("the engine runs torch's float32 matmuls here")
    batcher, counted = _decoder_batcher(engine)
    worst = 0.0
    for prompt, greedy, reference in float32_traces:
        cache = batcher.new_cache()
        batcher.prefill(cache, prompt)  # the prompt through the modules, each step decoded
        decoded = [torch.softmax(batcher.step(cache, token), -1) for token in greedy]
        worst = max(
            worst,
            *(float((a - b).abs().max()) for a, b in zip(reference[1:], decoded, strict=True)),
        )
    assert counted.rows == [1] * STEPS * len(float32_traces)
    assert 0.0 < worst <= 1e-3


def test_a_row_decodes_alone_as_in_a_batch_and_as_the_modules_do(
    engine: Engine, kernel_builds: dict[str, Kernels]
) -> None:
    """Bit for bit alone and in a batch, in every build (one of whose rows must grow its
    buffers); within float error of the modules' path (every layer's kernels, one by one)."""
    model, kernels = engine.model, engine.model.kernels
    if kernels is None:
        pytest.skip("the engine runs torch's float32 matmuls here")
    modules = Batcher(model.model, device=CPU, lock=model.lock, attend=kernels.attend,
                      attend_rows=kernels.attend_rows, prompt_cache_bytes=0)  # fmt: skip
    results: dict[str, list[torch.Tensor]] = {}
    for name in ["modules", *(f"{build} {way}" for build in kernel_builds
                              for way in ("alone", "batched"))]:  # fmt: skip
        build, _, way = name.partition(" ")
        batcher, counted = (
            (modules, None) if name == "modules" else _decoder_batcher(engine, kernel_builds[build])
        )
        caches = _three_prompts(batcher)
        for layer in caches[0].layers:  # row 0's buffers full: its first step must grow them
            layer._buffers = (layer.keys.clone(), layer.values.clone())
            layer.keys, layer.values = layer._buffers
        logits: list[torch.Tensor] = []
        with torch.inference_mode():
            for step in range(3):
                rows = [_Row(cache, 7 + step) for cache in caches]
                if way == "alone":
                    logits += [batcher._forward([row])[0] for row in rows]
                else:
                    logits += batcher._forward(rows)
        if counted is not None:
            assert counted.rows == ([1] * 9 if way == "alone" else [3] * 3)
        assert [cache.get_seq_length() for cache in caches] == [33, 40, 47]
        results[name] = logits + [t for cache in caches for layer in cache.layers
                                  for t in (layer.keys, layer.values)]  # fmt: skip
    for build in kernel_builds:
        alone, batched = results[f"{build} alone"], results[f"{build} batched"]
        assert all(torch.equal(a, b) for a, b in zip(alone, batched, strict=True)), build
        for got, want in zip(alone, results["modules"], strict=True):
            assert float((got - want).abs().max()) <= 1e-3, build
        for got, want in zip(alone[:9], results["modules"][:9], strict=True):
            assert int(got.argmax()) == int(want.argmax()), build


def test_the_decoder_takes_only_a_llama_running_from_blocks(
    engine: Engine, float32_model: Any
) -> None:
    if engine.model.kernels is None:
        pytest.skip("the engine runs torch's float32 matmuls here")
    assert Decoder.of(float32_model, engine.model.kernels) is None  # torch's matmuls
    batcher, counted = _decoder_batcher(engine)
    with torch.inference_mode():
        decoded = batcher._forward([_Row(cache, 7) for cache in _three_prompts(batcher)[:2]])
        assert counted.rows == [2]
        # A cache whose layers concatenate (no buffers to write into): the modules run the batch.
        plain = DynamicCache(config=engine.model.model.config)
        batcher.prefill(plain, list(range(100, 137)))
        assert type(plain.layers[0]) is DynamicLayer
        mixed = batcher._forward([_Row(_three_prompts(batcher)[0], 7), _Row(plain, 7)])
    assert counted.rows == [2]
    assert plain.get_seq_length() == 38
    for got, want in zip(mixed, decoded, strict=True):
        assert float((got - want).abs().max()) <= 1e-3
        assert int(got.argmax()) == int(want.argmax())
