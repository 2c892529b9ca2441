"""Concurrent sessions on a remote engine (a real ``vllm serve`` of the local model's weights)
against one remote session and against the same number of sessions on the local model.

Starts vLLM (``.venv-vllm``, as ``make vllm`` does) and Maskscope with it configured as the
remote engine ``vllm``, then runs, one scenario after the other: 1 remote session, N concurrent
remote sessions, N concurrent local sessions, each M greedy steps (one ``step`` request of M).
Prints aggregate tokens/s and the two ratios. Each remote step is one request for the raw
distribution (the whole vocabulary, or the top-K with ``--max-logprobs K``), plus one with
``allowed_token_ids`` when the top-K holds no allowed token.

Usage: ``PYTHONPATH=. .venv/bin/python bench/remote_load.py [--sessions 8] [--steps 50]
[--max-logprobs -1]``
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import httpx
from live_server import free_port, live_server
from load import _session_body as load_bench_body

from app.engine.model.loading import checkpoint_source
from app.engine.model.remote.launch import DEFAULT_SERVED_NAME
from app.settings import Settings
from tests.vllm_server import VllmServer


def _session_body(steps: int, model: str) -> dict[str, object]:
    return {**load_bench_body(steps), "model": model}


def _run_session(base: str, steps: int, model: str, counts: list[int], errors: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=600) as client:
        created = client.post("/api/sessions", json=_session_body(steps, model))
        if created.status_code != 200:
            errors.append(f"create {created.status_code}: {created.text[:200]}")
            return
        answer = client.post(f"/api/sessions/{created.json()['id']}/step", json={"n": steps})
        if answer.status_code != 200:
            errors.append(f"step {answer.status_code}: {answer.text[:200]}")
            return
        counts.append(len(answer.json()["steps"]))


def _scenario(base: str, sessions: int, steps: int, model: str, errors: list[str]) -> float:
    """Aggregate tokens/s of ``sessions`` sessions stepping at once."""
    counts: list[int] = []
    workers = [threading.Thread(target=_run_session, args=(base, steps, model, counts, errors))
               for _ in range(sessions)]  # fmt: skip
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    rate = sum(counts) / elapsed
    print(f"{sessions} {model} session(s) x {steps} steps: {sum(counts)} tokens in "
          f"{elapsed:.1f} s = {rate:.1f} tokens/s")  # fmt: skip
    return rate


def _wait_remote_ready(base: str) -> None:
    deadline = time.monotonic() + 300
    while True:
        listed = httpx.get(f"{base}/api/models", timeout=10).json()
        remote = next(m for m in listed if m["id"] == "vllm")
        if remote["ready"]:
            return
        assert time.monotonic() < deadline, remote["reason"]
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--max-logprobs", type=int, default=-1, help="vLLM's cap (-1: none)")
    args = parser.parse_args()
    source = checkpoint_source(Settings())
    server = VllmServer(
        "bench",
        model_dir=source,
        port=free_port(),
        extra=["--max-logprobs", str(args.max_logprobs)],
    )
    server.start()
    try:
        server.wait_ready(900)
        spec = {"id": "vllm", "url": server.url, "model": DEFAULT_SERVED_NAME, "tokenizer": source}
        env = {"MASKSCOPE_REMOTE_ENGINES": json.dumps([spec]),
               "MASKSCOPE_MAX_SESSIONS": str(max(32, args.sessions * 2))}  # fmt: skip
        with live_server(env) as (base, _):
            _wait_remote_ready(base)
            errors: list[str] = []
            for model in ("vllm", "local"):  # warm-up: compile cache, prefix cache, allocators
                _scenario(base, 1, 5, model, errors)
            one = _scenario(base, 1, args.steps, "vllm", errors)
            many = _scenario(base, args.sessions, args.steps, "vllm", errors)
            local = _scenario(base, args.sessions, args.steps, "local", errors)
    finally:
        server.stop()
    per_step = "the whole vocabulary" if args.max_logprobs < 0 else f"top-{args.max_logprobs}"
    print(f"remote distribution per step: {per_step}")
    print(f"{args.sessions} remote sessions / 1 remote session: {many / one:.2f}x aggregate")
    print(f"{args.sessions} remote sessions / {args.sessions} local sessions: {many / local:.2f}x")
    print(f"answers that were not 2xx: {len(errors)} {json.dumps(errors) if errors else ''}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
