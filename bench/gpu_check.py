"""The GPU path, on a machine with CUDA: model on the GPU, mask filled on CPU, applied on device.

Checks, on ``cuda``:

1. every example schema traced greedily: every chosen token is allowed in its step's bitmask,
   the probe finds no mask/accept disagreement, the output validates; prints tokens/s and the
   share of step time spent outside the forward pass, and its p50 in ms (the checks overlap the
   next forward pass: target <= 0.5 ms);
2. a seeded sampled session (temperature and top-p: the sampler runs on the logits' device),
   gone back and stepped again twice: the records repeat (timings and rollback checks aside).

Exits 1 on any failure, 2 without CUDA.

Usage: ``MASKSCOPE_DEVICE=cuda .venv/bin/python bench/gpu_check.py``
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from app.engine import (
    ChatMessage,
    Engine,
    GrammarKind,
    GrammarSpec,
    SamplingParams,
    Session,
    with_schema,
)
from app.engine.mask import words_from_bytes
from app.examples import Example, load_examples
from app.settings import Settings


def _session(engine: Engine, example: Example, sampling: SamplingParams | None = None) -> Session:
    source = example.source()
    return engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, source),
        messages=[
            ChatMessage("system", with_schema(example.system, source)),
            ChatMessage("user", example.prompt),
        ],
        max_tokens=example.max_tokens,
        sampling=sampling,
    )


def check_greedy(engine: Engine, example: Example) -> bool:
    """Trace ``example`` greedily; print one line; True when everything held."""
    session = _session(engine, example)
    start = time.perf_counter()
    session.run(example.max_tokens)
    rate = len(session.steps) / (time.perf_counter() - start)
    allowed = all(
        (int(words_from_bytes(s.bitmask)[s.token_id >> 5]) >> (s.token_id & 31)) & 1
        for s in session.steps
    )
    agree = all(s.mask_accept_agree for s in session.steps)
    validation = session.validation()
    valid = validation is not None and validation.valid
    steps = session.steps[1:] or session.steps  # step 0 holds the prefill
    share = statistics.mean((s.total_ms - s.forward_ms) / s.forward_ms for s in steps)
    outside = statistics.median(s.total_ms - s.forward_ms for s in steps)
    ok = allowed and agree and valid
    print(
        f"{'ok  ' if ok else 'FAIL'} {example.id:<10} {len(session.steps):>4} steps "
        f"{rate:7.1f} tok/s  outside forward {100 * share:5.1f}% (p50 {outside:.2f} ms)  "
        f"stop {session.stop_reason}  allowed {allowed} agree {agree} valid {valid}"
    )
    return ok


def check_sampled_repeat(engine: Engine, example: Example, *, steps: int = 40) -> bool:
    """Sample ``steps`` tokens with a seed, go back and step again twice; print one line.

    True when every record repeats (timings aside) and no probe found a disagreement.
    """
    sampling = SamplingParams(temperature=1.0, top_p=0.9, seed=20240917)
    session = _session(engine, example, sampling)
    original = [r.without_timings() for r in session.run(steps)]
    taken = len(original)
    session.back(taken // 2)
    session.run(taken // 2)
    halfway = [r.without_timings() for r in session.steps] == original
    session.back(taken)
    session.run(taken)
    again = [r.without_timings() for r in session.steps] == original
    agree = all(s.mask_accept_agree for s in session.steps)
    ok = halfway and again and agree and taken > 1
    print(
        f"{'ok  ' if ok else 'FAIL'} {example.id:<10} sampled {taken} steps (top-p 0.9, seed "
        f"{sampling.seed}): repeat after half back {halfway}, after all back {again}, "
        f"agree {agree}"
    )
    return ok


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    engine = Engine.load(Settings(device="cuda"))
    failures = 0
    try:
        assert engine.model.device.type == "cuda"
        print(f"model on {torch.cuda.get_device_name()} ({engine.model.model.dtype})")
        examples = load_examples()
        for example in examples:
            failures += not check_greedy(engine, example)
        failures += not check_sampled_repeat(engine, next(e for e in examples if e.id == "nested"))
    finally:
        engine.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
