"""The Doctor on 40 real BFCL tool sets, idle and under load: the answer must not change.

Each of the 40 BFCL tool definitions vendored in ``tests/fixtures/bfcl/`` (one to five
parameters) becomes a ``tools`` source for vLLM's own ``hermes`` builder (``tool_choice:
required``, ``strict``), examined on Qwen3.6's shipped tokenizer with ``POST /api/doctor`` by a
live server (``python -m app serve`` on loopback, its Doctor in worker processes). Three phases:

1. warm-up: one examination, which loads Qwen3.6's tokenizer, starts vLLM's runner and the
   Doctor's workers (timed apart, never counted);
2. idle: the 40, one after the other;
3. loaded: the 40 again while ``--sessions`` sessions stream their steps over SSE without pause
   (``bench/load.py``'s load: the server's forward passes), plus ``--burn`` CPU-burning
   processes (default: one per core).

Printed: the answers by status and code in each phase (``grammar_too_complex``: target 0;
``cut_short_by_load``: target 0 at the default budget), the tool sets whose answer under load
differs from the idle one (times aside; target 0), and the median examination time idle and
loaded. Times are wall-clock on this machine, printed as measured; nothing is asserted.

Usage: ``.venv/bin/python bench/doctor_load.py [--sessions 4] [--burn N] [--steps 64]
[--sets 40]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import httpx
from live_server import ROOT, live_server

sys.path.insert(0, str(ROOT))
from tests.doctor.bfcl import entries, tools_source  # noqa: E402

_MODEL = "qwen3.6"
_TIMES = ("ms", "compile_ms", "compile_ms_any_whitespace")
_BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def timeless(value: Any) -> Any:
    """``value`` with its times left out (they are the load's, not the answer's)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def examine(client: httpx.Client, source: str) -> tuple[int, str, Any, float]:
    """One examination: its status, error code ("" when 200), answer and seconds."""
    body = {"grammar": {"kind": "tools", "source": source}, "model": _MODEL}
    started = time.perf_counter()
    response = client.post("/api/doctor", json=body)
    seconds = time.perf_counter() - started
    answer = response.json()
    code = "" if response.status_code == 200 else answer["error"]["code"]
    return response.status_code, code, answer, seconds


def stream_sessions(base: str, steps: int, stop: threading.Event, errors: list[str]) -> None:
    """Sessions one after the other until ``stop``: each streams ``steps`` steps over SSE."""
    source = (ROOT / "schemas" / "pricing.json").read_text()
    body = {"grammar": {"kind": "json_schema", "source": source},
            "messages": [{"role": "user", "content": "Acme's usage dropped 40%. Discount?"}],
            "max_tokens": steps}  # fmt: skip
    with httpx.Client(base_url=base, timeout=600) as client:
        while not stop.is_set():
            created = client.post("/api/sessions", json=body)
            if created.status_code != 200:
                errors.append(f"session {created.status_code}")
                time.sleep(1)
                continue
            url = f"/api/sessions/{created.json()['id']}/events?format=json"
            with client.stream("GET", url) as stream:
                for _ in stream.iter_lines():
                    if stop.is_set():
                        break


def phase(client: httpx.Client, sources: list[tuple[str, str]]) -> dict[str, tuple[Any, ...]]:
    """Every tool set examined once, by id."""
    return {name: examine(client, source) for name, source in sources}


def report(label: str, answers: dict[str, tuple[Any, ...]]) -> list[float]:
    codes = Counter(f"{status} {code}".strip() for status, code, _, _ in answers.values())
    seconds = [s for _, _, _, s in answers.values()]
    print(f"{label}: {dict(codes)}; grammar_too_complex {codes_of(answers, 'grammar_too_complex')}"
          f" (target 0), cut_short_by_load {codes_of(answers, 'cut_short_by_load')}; median "
          f"{statistics.median(seconds):.2f} s, max {max(seconds):.2f} s")  # fmt: skip
    return seconds


def codes_of(answers: dict[str, tuple[Any, ...]], code: str) -> int:
    return sum(1 for _, found, _, _ in answers.values() if found == code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4, help="sessions streaming at once")
    parser.add_argument("--steps", type=int, default=64, help="steps of each session")
    parser.add_argument("--burn", type=int, default=os.cpu_count() or 1,
                        help="CPU-burning processes besides the sessions")  # fmt: skip
    parser.add_argument("--sets", type=int, default=40, help="tool sets examined (the first N)")
    args = parser.parse_args()
    sources = [(entry.id, tools_source(entry)) for entry in entries()[: args.sets]]
    with live_server() as (base, _), httpx.Client(base_url=base, timeout=900) as client:
        started = time.perf_counter()
        while client.get(f"/api/vocab?model={_MODEL}").status_code == 503:  # loading
            time.sleep(0.5)
        status, code, _, seconds = examine(client, sources[0][1])
        print(f"warm-up (tokenizer {time.perf_counter() - started - seconds:.1f} s, then the "
              f"first examination: vLLM's runner, the Doctor's workers): {seconds:.1f} s, "
              f"{status} {code}")  # fmt: skip
        idle = phase(client, sources)
        stop, errors = threading.Event(), list[str]()
        loaders = [threading.Thread(target=stream_sessions, args=(base, args.steps, stop, errors))
                   for _ in range(args.sessions)]  # fmt: skip
        burners = [subprocess.Popen([sys.executable, "-c", _BURN.format(s=3600)])
                   for _ in range(args.burn)]  # fmt: skip
        try:
            for loader in loaders:
                loader.start()
            loaded = phase(client, sources)
        finally:
            stop.set()
            for burner in burners:
                burner.kill()
                burner.wait()
            for loader in loaders:
                loader.join()
    print(f"{len(sources)} BFCL tool sets, vLLM hermes on {_MODEL}; load: {args.sessions} sessions "
          f"streaming + {args.burn} CPU burners on {os.cpu_count()} cores")  # fmt: skip
    idle_s = report("idle", idle)
    loaded_s = report("loaded", loaded)
    changed = [name for name in idle if timeless(idle[name][2]) != timeless(loaded[name][2])]
    print(f"answers that changed under load (times aside): {len(changed)} (target 0) {changed}")
    print(f"median examination loaded / idle: "
          f"{statistics.median(loaded_s) / statistics.median(idle_s):.2f}x")  # fmt: skip
    print(f"session errors while loading: {len(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
