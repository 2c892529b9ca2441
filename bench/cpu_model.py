"""The default model on CPU: decode speed and probability drift of each way to run it.

Variants: float32 with every core (torch's default: the reference), then with ``--threads``
threads (default 1): float32 with sdpa and with eager attention, bfloat16, dynamic int8
quantisation of the linear layers (``torch.ao``) and, with ``--compile``, ``torch.compile``.
Each decodes the examples' prompts token by token with a KV cache, teacher-forced on float32's
greedy tokens (so every variant sees the same prefixes); the table gives tokens/s, the ratio to
the reference measured in the same run, and the largest difference of any token's probability
from the reference's at any step (the shipped setting must stay within 1e-3). Rounds alternate
the order of the variants, so the machine's load (shared, printed) hits each alike.

Usage: ``.venv/bin/python bench/cpu_model.py [--tokens 24] [--rounds 2] [--prompts 5]
[--threads 1] [--compile]``
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from app.engine.model import checkpoint_source
from app.examples import load_examples
from app.settings import Settings

Variant = tuple[str, Callable[[], Any], int]  # name, model factory, threads


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
    cache = DynamicCache()
    logits = model(input_ids=torch.tensor([prompt]), past_key_values=cache).logits[0, -1]
    tokens, probs = [], []
    start = time.perf_counter()
    for step in range(n):
        probs.append(torch.softmax(logits.float(), dim=-1))
        token = forced[step] if forced is not None else int(torch.argmax(logits))
        tokens.append(token)
        out = model(input_ids=torch.tensor([[token]]), past_key_values=cache)
        logits = out.logits[0, -1]
    return tokens, probs, time.perf_counter() - start


def _variants(source: str, compile_too: bool, threads: int) -> list[Variant]:
    cores = os.cpu_count() or 1

    def load(dtype: torch.dtype = torch.float32, attn: str = "sdpa") -> Any:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn)
        return model.eval()

    def int8() -> Any:
        quantize: Any = torch.ao.quantization.quantize_dynamic
        return quantize(load(), {torch.nn.Linear}, dtype=torch.qint8)

    def compiled() -> Any:
        model = load()
        model.forward = torch.compile(model.forward, dynamic=True)
        return model

    variants: list[Variant] = [
        ("float32 sdpa", load, cores),
        (f"float32 sdpa {threads} thr", load, threads),
        (f"float32 eager {threads} thr", lambda: load(attn="eager"), threads),
        (f"bfloat16 {threads} thr", lambda: load(torch.bfloat16), threads),
        (f"int8 dynamic {threads} thr", int8, threads),
    ]
    if compile_too:
        variants.append((f"float32 compile {threads} thr", compiled, threads))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=5, help="how many examples' prompts")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the variants")
    args = parser.parse_args()
    source = checkpoint_source(Settings())
    prompts = _prompts(AutoTokenizer.from_pretrained(source), args.prompts)
    variants = _variants(source, args.compile, args.threads)
    models = {name: make() for name, make, _ in variants}
    threads = {name: count for name, _, count in variants}
    torch.set_num_threads(threads["float32 sdpa"])
    reference = [_decode(models["float32 sdpa"], p, None, args.tokens) for p in prompts]
    seconds = dict.fromkeys(models, 0.0)
    drift = dict.fromkeys(models, 0.0)
    print(f"{len(prompts)} prompts x {args.tokens} tokens x {args.rounds} rounds; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
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
    base = count / seconds["float32 sdpa"]
    print(f"{'variant':24s} {'tokens/s':>9s} {'x float32':>10s} {'max |dp|':>10s}  within 1e-3")
    for name in models:
        rate = count / seconds[name]
        ok = "yes" if drift[name] <= 1e-3 else "no"
        print(f"{name:24s} {rate:9.1f} {rate / base:10.2f} {drift[name]:10.2e}  {ok}")


if __name__ == "__main__":
    main()
