"""N concurrent sessions, each running M steps over SSE, against a live server on loopback.

Prints throughput, p50 / p95 step latency (time between a session's consecutive step events),
the server's RSS before (after warm-up), during (peak) and after the sessions expire, and the
count of answers that were not 2xx. Target: no errors; RSS after within 20% of the baseline.
It first runs one session alone, in the same server: the N sessions' throughput over that one
session's is the batching ratio (target: 8 sessions >= 3x one session's tokens/s, the steps
waiting at once sharing one forward pass), and the mean batch size the server's ``/metrics``
report for each phase (steps per forward pass), with the prompts copied from an identical one.

Alone and together alternate for ``--rounds`` rounds (the machine's load moves both alike);
each round's ratio is printed, and their median.

Usage: ``.venv/bin/python bench/load.py [--sessions 8] [--steps 50] [--rounds 3] [--ttl 15]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
from live_server import ROOT, live_server


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _forward(base: str) -> dict[str, float]:
    """The server's forward-pass counters (``maskscope_forward_*_total``), by short name."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    prefix = "maskscope_forward_"
    return {
        line.split()[0][len(prefix) : -len("_total")]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith(prefix) and line.split()[0].endswith("_total")
    }


def _moved(before: dict[str, float], after: dict[str, float]) -> str:
    """The mean batch size and the prompts reused between two scrapes."""
    batches, rows, prompts, reused = (
        after.get(name, 0.0) - before.get(name, 0.0)  # 0: a server without these counters
        for name in ("batches", "batch_rows", "prompts", "prompts_reused")
    )
    return (f"{rows / max(batches, 1):.2f} steps per forward pass ({rows:.0f} in {batches:.0f}); "
            f"prompts copied {reused:.0f} of {prompts:.0f}")  # fmt: skip


def _session_body(steps: int) -> dict[str, object]:
    source = (ROOT / "schemas" / "pricing.json").read_text()
    return {
        "grammar": {"kind": "json_schema", "source": source},
        "messages": [{"role": "system", "content": "You are a pricing analyst. Reply with JSON."},
                     {"role": "user", "content": "Acme Corp's usage dropped 40%. Discount?"}],
        "schema_in_prompt": True,
        "max_tokens": steps,
    }  # fmt: skip


def _run_session(base: str, steps: int, arrivals: list[list[float]], errors: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=600) as client:
        created = client.post("/api/sessions", json=_session_body(steps))
        if created.status_code != 200:
            errors.append(f"create {created.status_code}")
            return
        times: list[float] = []
        url = f"/api/sessions/{created.json()['id']}/events?format=json"
        with client.stream("GET", url) as stream:
            if stream.status_code != 200:
                errors.append(f"events {stream.status_code}")
                return
            for line in stream.iter_lines():
                if line.startswith("event: step"):
                    times.append(time.perf_counter())
        arrivals.append(times)


def _alone(base: str, steps: int, errors: list[str]) -> float:
    """One session's tokens/s, alone on the server."""
    arrivals: list[list[float]] = []
    started = time.perf_counter()
    _run_session(base, steps, arrivals, errors)
    return sum(len(times) for times in arrivals) / (time.perf_counter() - started)


def _concurrent(
    base: str, sessions: int, steps: int, errors: list[str]
) -> tuple[list[list[float]], float]:
    """``sessions`` sessions at once: each one's step arrival times, and the seconds they took."""
    arrivals: list[list[float]] = []
    started = time.perf_counter()
    workers = [threading.Thread(target=_run_session, args=(base, steps, arrivals, errors))
               for _ in range(sessions)]  # fmt: skip
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return arrivals, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of one session alone then the sessions at once")  # fmt: skip
    parser.add_argument("--ttl", type=float, default=15.0, help="session lifetime (s)")
    args = parser.parse_args()
    env = {"MASKSCOPE_SESSION_TTL_S": str(args.ttl),
           "MASKSCOPE_MAX_SESSIONS": str(max(32, args.sessions * 2))}  # fmt: skip
    with live_server(env) as (base, pid):
        warm: list[list[float]] = []
        errors: list[str] = []
        for _ in range(2):  # warm-up: compile caches, allocator pools, first-forward costs
            _run_session(base, args.steps, warm, errors)
        time.sleep(args.ttl + min(args.ttl / 2, 30) + 2)  # the warm-up sessions expire
        baseline = _rss_mb(pid)

        peak = [baseline]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak.append(_rss_mb(pid))
                time.sleep(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        rounds: list[tuple[float, float, str, str]] = []
        gaps: list[float] = []
        for _ in range(args.rounds):  # alternated: a change of the machine's load hits both
            counted = _forward(base)
            alone = _alone(base, args.steps, errors)
            alone_batches = _moved(counted, counted := _forward(base))
            arrivals, elapsed = _concurrent(base, args.sessions, args.steps, errors)
            batches = _moved(counted, _forward(base))
            tokens = sum(len(times) for times in arrivals)
            rounds.append((alone, tokens / elapsed, alone_batches, batches))
            gaps += [(b - a) * 1000 for ts in arrivals for a, b in zip(ts, ts[1:], strict=False)]
        done.set()
        sampler.join()
        time.sleep(args.ttl + min(args.ttl / 2, 30) + 2)  # every session expires
        after = _rss_mb(pid)

    print(f"sessions: {args.sessions} x {args.steps} steps over SSE, {args.rounds} rounds; "
          f"session lifetime {args.ttl:g} s")  # fmt: skip
    for number, (alone, together, alone_batches, batches) in enumerate(rounds, 1):
        print(f"round {number}: one session alone {alone:.1f} tokens/s, {args.sessions} at once "
              f"{together:.1f} tokens/s = {together / alone:.2f}x")  # fmt: skip
        print(f"  batches alone: {alone_batches}")
        print(f"  batches {args.sessions} at once: {batches}")
    ratio = statistics.median(together / alone for alone, together, *_ in rounds)
    print(f"{args.sessions} sessions over one session alone (same server, same run): median "
          f"{ratio:.2f}x (target for 8: >= 3x)")  # fmt: skip
    print(f"step latency per session ({args.sessions} at once): p50 {statistics.median(gaps):.0f} "
          f"ms, p95 {statistics.quantiles(gaps, n=20)[-1]:.0f} ms")  # fmt: skip
    print(
        f"server RSS: baseline {baseline:.0f} MB, peak {max(peak):.0f} MB, "
        f"after expiry {after:.0f} MB ({100 * (after / baseline - 1):+.1f}%; target within 20%)"
    )
    print(f"answers that were not 2xx: {len(errors)} {json.dumps(errors) if errors else ''}")
    return 0 if not errors and after <= baseline * 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
