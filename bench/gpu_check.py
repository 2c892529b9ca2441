"""The GPU path, on a machine with CUDA: model on the GPU, mask filled on CPU, applied on device.

Checks, for every example schema traced greedily on ``cuda``: every chosen token is allowed in
its step's bitmask, mask and accept agree, the output validates; then prints tokens/s and the
share of step time spent outside the forward pass. Exits 1 on any failure, 2 without CUDA.

Usage: ``MASKSCOPE_DEVICE=cuda .venv/bin/python bench/gpu_check.py``
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, with_schema
from app.engine.mask import words_from_bytes
from app.examples import load_examples
from app.settings import Settings


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    engine = Engine.load(Settings(device="cuda"))
    failures = 0
    try:
        assert engine.model.device.type == "cuda"
        print(f"model on {torch.cuda.get_device_name()} ({engine.model.model.dtype})")
        for example in load_examples():
            source = example.source()
            session = engine.new_session(
                GrammarSpec(GrammarKind.JSON_SCHEMA, source),
                messages=[
                    ChatMessage("system", with_schema(example.system, source)),
                    ChatMessage("user", example.prompt),
                ],
                max_tokens=example.max_tokens,
            )
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
            share = statistics.mean(
                (s.total_ms - s.forward_ms) / s.forward_ms for s in session.steps[1:]
            )
            ok = allowed and agree and valid
            failures += not ok
            verdict = "ok  " if ok else "FAIL"
            print(
                f"{verdict} {example.id:<10} {len(session.steps):>4} steps {rate:7.1f} tok/s"
                f"  outside forward {100 * share:5.1f}%  stop {session.stop_reason}"
                f"  allowed {allowed} agree {agree} valid {valid}"
            )
    finally:
        engine.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
