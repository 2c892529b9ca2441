"""A flood of slow compiles and Pydantic sources against a live server: do steps still flow?

Measures, in one run on loopback: the latency of a one-token step on an idle server, then while
threads send slow grammars (seconds each in xgrammar) and slow Pydantic sources (seconds each in
the sandbox), more than the workers and their queues hold; prints both medians and their ratio,
how many flood requests were refused with 429 and how many answered 5xx (target: none), and the
largest replay's answer size with and without bitmasks. Then another client's permalink GET
while one client keeps 12 big tools sources (256 KiB, a second or more of CPU each to parse) in
flight from another loopback address: both medians, their ratio (issue 46: 8 ms became 56 s when
the parses ran in asyncio's default pool) and the flood's answers by status.

Usage: ``.venv/bin/python bench/flood.py [--compiles 12] [--sources 8] [--tools 12]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import statistics
import sys
import threading
import time
from collections import Counter
from typing import Any

import httpx
from live_server import ROOT, live_server

_ENV = {
    "MASKSCOPE_COMPILE_WORKERS": "2",
    "MASKSCOPE_COMPILE_TIMEOUT_S": "10",
    "MASKSCOPE_SANDBOX_WORKERS": "2",
    "MASKSCOPE_QUEUE_MAX": "2",
}
_REPLAY_GRAMMAR = {"kind": "regex", "source": "[a-z ]+"}
_JSON = {"content-type": "application/json"}


def _slow_schema(i: int) -> dict[str, object]:
    pattern = f"^(ab|cd|ef){{1,{6000 + i}}}$"
    return {"kind": "json_schema", "source": json.dumps({"type": "string", "pattern": pattern})}


def _slow_pydantic(i: int) -> dict[str, object]:
    lines = ["from typing import Optional, Union", "from pydantic import BaseModel"]
    for k in range(100):
        lines.append(f"class M{i}x{k}(BaseModel):")
        for f in range(14):
            kind = f"Optional[list[dict[str, M{i}x{k - 1}]]]" if k else "int"
            if k > 1 and f % 2:
                kind = f"Union[M{i}x{k - 1}, M{i}x{k - 2}, None]"
            lines.append(f"    f{f}: {kind} = None")
    return {"kind": "pydantic", "source": "\n".join(lines)}


def _big_tools(limit: int = 256 * 1024) -> dict[str, object]:
    """A tools source just under the size limit: thousands of small tools, refused at the end
    (its ``tool_choice`` names none of them), so that each costs a whole parse and no compile."""
    tool = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 9}}}
    data: dict[str, Any] = json.loads((ROOT / "schemas" / "router_tools.tools.json").read_text())
    data["tools"] = []
    data["tool_choice"] = {"type": "function", "function": {"name": "none"}}
    while len(json.dumps(data)) < limit - 200:
        name = f"t{len(data['tools'])}"
        data["tools"].append({"type": "function", "function": {"name": name, "parameters": tool}})
    return {"kind": "tools", "source": json.dumps(data)}


def _get_latencies(client: httpx.Client, path: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        client.get(path).raise_for_status()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def _send_tools(base: str, senders: int, stop: Any, statuses: Any) -> None:
    """In a process of its own (so that its threads never hold the measuring client's GIL):
    ``senders`` threads from 127.0.0.2, each sending a big tools source again as soon as it is
    answered, until ``stop`` is set; the statuses counted in ``statuses``."""
    content = json.dumps(_big_tools()).encode()
    lock = threading.Lock()

    def send() -> None:
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=base, timeout=600, transport=transport) as own:
            while not stop.is_set():
                status = own.post("/api/compile", content=content, headers=_JSON).status_code
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=send) for _ in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _tools_flood(base: str, senders: int) -> tuple[float, float, Counter[int]]:
    """Another client's permalink GET, idle and while one client (127.0.0.2, another process)
    keeps ``senders`` big tools sources in flight: both medians, and the flood's statuses."""
    body = {"grammar": _REPLAY_GRAMMAR, "raw_prompt": "A story:", "max_tokens": 8,
            "actions": [{"op": "step", "n": 4}]}  # fmt: skip
    with httpx.Client(base_url=base, timeout=600) as client, multiprocessing.Manager() as shared:
        path = f"/api/permalinks/{client.post('/api/permalinks', json=body).json()['id']}"
        _get_latencies(client, path, 3)  # warm
        idle = _get_latencies(client, path, 20)
        stop, statuses = shared.Event(), shared.dict()
        flood = multiprocessing.Process(target=_send_tools, args=(base, senders, stop, statuses))
        flood.start()
        while sum(statuses.values()) < senders:  # each sender answered once: all in flight
            time.sleep(0.1)
        busy = _get_latencies(client, path, 20)
        stop.set()
        flood.join()
        counted = Counter(dict(statuses))
    return statistics.median(idle), statistics.median(busy), counted


def _step_latencies(client: httpx.Client, session_id: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        answer = client.post(f"/api/sessions/{session_id}/step")
        answer.raise_for_status()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def _replay_sizes(client: httpx.Client) -> tuple[int, int, float, float]:
    text = "a" + " hello" * 4095  # 4096 tokens, the default cap
    body: dict[str, object] = {"grammar": _REPLAY_GRAMMAR, "text": text}
    started = time.perf_counter()
    bare = client.post("/api/replay", json=body)
    bare_ms = (time.perf_counter() - started) * 1000
    full = client.post("/api/replay", json={**body, "bitmask_for": list(range(0, 4096, 64))})
    form = {**_REPLAY_GRAMMAR, "strict_mode": "on", "text": text}  # the API's options
    page = client.get("/").text  # the page's CSRF cookie (kept by the client) and token
    token = {"X-CSRF-Token": re.findall(r'<meta name="csrf-token" content="([^"]+)"', page)[0]}
    started = time.perf_counter()
    client.post("/ui/replay/4095", data=form, headers=token).raise_for_status()
    inspect_ms = (time.perf_counter() - started) * 1000
    return len(bare.content), len(full.content), bare_ms, inspect_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", type=int, default=12)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--tools", type=int, default=12)
    args = parser.parse_args()
    session = {
        "grammar": {
            "kind": "json_schema",
            "source": (ROOT / "schemas" / "nested.json").read_text(),
        },
        "messages": [{"role": "user", "content": "Create user 42, Ada Lovelace, dark theme."}],
        "max_tokens": 400,
    }
    with live_server(_ENV) as (base, _), httpx.Client(base_url=base, timeout=600) as client:
        client.post("/api/compile", json=_REPLAY_GRAMMAR).raise_for_status()  # cached for later
        session_id = client.post("/api/sessions", json=session).json()["id"]
        _step_latencies(client, session_id, 1)  # the prompt's forward pass
        idle = _step_latencies(client, session_id, 5)
        statuses: Counter[int] = Counter()

        def send(body: dict[str, object]) -> None:
            with httpx.Client(base_url=base, timeout=600) as own:
                statuses[own.post("/api/compile", json=body).status_code] += 1

        flood = [_slow_schema(i) for i in range(args.compiles)]
        flood += [_slow_pydantic(i) for i in range(args.sources)]
        threads = [threading.Thread(target=send, args=(body,)) for body in flood]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        busy = _step_latencies(client, session_id, 5)
        for thread in threads:
            thread.join()
        bare, full, replay_ms, inspect_ms = _replay_sizes(client)
        # Both compile workers were killed by the slow grammars: wait for their successors, so
        # that the server stops at once (two compiles at a time take both workers).
        warm = [threading.Thread(target=send, args=({"kind": "regex", "source": f"[0-9]{{{n}}}"},))
                for n in (1, 2)]  # fmt: skip
        for thread in warm:
            thread.start()
        for thread in warm:
            thread.join()
        get_idle, get_busy, tool_statuses = _tools_flood(base, args.tools)
    idle_ms, busy_ms = statistics.median(idle), statistics.median(busy)
    print(f"step p50 idle {idle_ms:.0f} ms, during the flood {busy_ms:.0f} ms: "
          f"ratio {busy_ms / idle_ms:.2f}")  # fmt: skip
    statuses[200] -= 2  # the two compiles that waited for the workers
    print(f"flood answers by status: {dict(sorted(statuses.items()))}")
    print(f"largest replay (4096 tokens): {bare} bytes without bitmasks, {full} with 64; "
          f"{replay_ms:.0f} ms; the last token's inspector {inspect_ms:.0f} ms")  # fmt: skip
    print(
        f"another client's permalink GET p50 idle {get_idle:.1f} ms, while one client sends "
        f"{args.tools} big tools sources at once {get_busy:.1f} ms: ratio "
        f"{get_busy / get_idle:.2f}; the flood's answers: {dict(sorted(tool_statuses.items()))}"
    )
    failed = [s for s in (*statuses, *tool_statuses) if s >= 500]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
