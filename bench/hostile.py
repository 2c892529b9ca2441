"""Hostile requests against a live server: does a plain compile and a step stay fast?

Measures, in one run on loopback: the latency of a plain (uncached) compile and of a one-token
step on an idle server, then while 8 threads keep sending a cached plain compile (what that
much load alone costs on this machine), then while they keep sending the attack round's hostile
requests (#27): catastrophic-backtracking ``pattern`` tests (through ``/api/tests``, a permalink
and the Doctor) and ``$ref``s to a local HTTP listener and to a local file. Prints the medians
and their ratios to the idle ones, the hostile answers by status (target: 4xx or 200, never
5xx), how many connections the listener received and whether the file's content came back
(target: none).

A last row (#46): the latency of another client's trivial replay (median and worst of five) while
a second address (127.0.0.2) keeps both replay threads busy with ``root ::= root root | "a"``
over 1,600 a's (each stopped by ``MASKSCOPE_WALK_BUDGET_S``: 422 ``grammar_too_slow``), against
idle: the worst is the wait for a thread, bounded by one walk budget.

The Doctor's own memory and time bounds (#27 item 4: a huge ``minItems`` or ``minLength``) belong
to the Doctor's issue (#25) and are not sent here.

Usage: ``.venv/bin/python bench/hostile.py [--seconds 20]``
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
from live_server import live_server

_SECRET = "maskscope-bench-secret-7f3a"
_REDOS = {"type": "string", "pattern": "^(a+)+$"}
_REDOS_TESTS = [{"text": json.dumps("a" * 28 + "!"), "expect": "fail"}] * 100


class _Listener(http.server.BaseHTTPRequestHandler):
    connections = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).connections += 1
        body = json.dumps({"const": _SECRET}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def _grammar(schema: object) -> dict[str, object]:
    return {"kind": "json_schema", "source": json.dumps(schema)}


def _hostile(listener_url: str, secret_file: Path) -> list[tuple[str, dict[str, object]]]:
    remote = {"anyOf": [{"type": "integer"}, {"$ref": f"{listener_url}/secret.json"}]}
    local = {"anyOf": [{"type": "integer"}, {"$ref": secret_file.as_uri()}]}
    redos_session: dict[str, object] = {
        "grammar": _grammar(_REDOS),
        "messages": [{"role": "user", "content": "a"}],
        "tests": _REDOS_TESTS,
    }
    return [
        ("/api/tests", {"grammar": _grammar(_REDOS), "tests": _REDOS_TESTS}),
        ("/api/tests", {"grammar": _grammar(_REDOS), "tests": _REDOS_TESTS}),
        ("/api/permalinks", redos_session),
        ("/api/doctor", {"grammar": _grammar(_REDOS), "budget_ms": 2000}),
        ("/api/compile", _grammar(remote)),
        ("/api/compile", _grammar(local)),
        ("/api/tests", {"grammar": _grammar(remote), "tests": [{"text": "1", "expect": "pass"}]}),
        ("/api/doctor", {"grammar": _grammar(local)}),
    ]


_PATHOLOGICAL = {"kind": "ebnf", "source": 'root ::= root root | "a"'}
_HOSTILE_REPLAY: dict[str, object] = {"grammar": _PATHOLOGICAL, "text": "a" * 1600}
_TRIVIAL_REPLAY: dict[str, object] = {
    "grammar": {"kind": "ebnf", "source": 'root ::= "yes" | "no"'},
    "text": "yes",
}

_Latencies = tuple[list[float], list[float]]  # compiles, steps


def _timed(call: Callable[[], httpx.Response]) -> float:
    started = time.perf_counter()
    call().raise_for_status()
    return (time.perf_counter() - started) * 1000


def _measure(client: httpx.Client, session_id: str, first: int) -> _Latencies:
    compiles, steps = [], []
    for i in range(first, first + 5):  # a new schema each time: no cache hit
        schema = {"type": "object", "properties": {f"field_{i}": {"type": "integer"}}}
        body = _grammar(schema)
        compiles.append(_timed(partial(client.post, "/api/compile", json=body)))
        steps.append(_timed(partial(client.post, f"/api/sessions/{session_id}/step")))
    return compiles, steps


class _Flood:
    """8 threads, each sending its request again as soon as the last one is answered."""

    def __init__(
        self,
        base: str,
        requests: list[tuple[str, dict[str, object]]],
        address: str | None = None,
    ) -> None:
        self.base = base
        self.requests = requests
        self.address = address  # the loopback address sent from (another client), if any
        self.statuses: Counter[str] = Counter()
        self.leaked = False

    def during(self, seconds: float, measure: Callable[[], _Latencies]) -> _Latencies:
        """Run the flood for ``seconds`` and ``measure`` one second into it."""
        stop = time.monotonic() + seconds

        def send(route: str, body: dict[str, object]) -> None:
            transport = httpx.HTTPTransport(local_address=self.address)
            with httpx.Client(base_url=self.base, timeout=600, transport=transport) as own:
                while time.monotonic() < stop:
                    answer = own.post(route, json=body)
                    self.statuses[f"{route} {answer.status_code}"] += 1
                    self.leaked = self.leaked or _SECRET in answer.text

        threads = [threading.Thread(target=send, args=pair) for pair in self.requests]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        measured = measure()
        for thread in threads:
            thread.join()
        return measured


def _replays(client: httpx.Client) -> _Latencies:
    """Five trivial replays (a cached grammar): their latencies, as the first of the pair."""
    return [_timed(partial(client.post, "/api/replay", json=_TRIVIAL_REPLAY)) for _ in range(5)], []


def _ratios(label: str, idle: _Latencies, busy: _Latencies) -> None:
    for name, before, during in zip(("compile", "step"), idle, busy, strict=True):
        calm, loaded = statistics.median(before), statistics.median(during)
        print(f"{name} p50 idle {calm:.0f} ms, {label} {loaded:.0f} ms: "
              f"ratio {loaded / calm:.2f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each flood lasts")
    args = parser.parse_args()
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    listener_url = f"http://127.0.0.1:{listener.server_address[1]}"
    session = {
        # a long string: the grammar never ends within the steps measured
        "grammar": _grammar({"type": "string", "minLength": 1000}),
        "messages": [{"role": "user", "content": "Describe the sea."}],
        "max_tokens": 400,
    }
    with tempfile.TemporaryDirectory() as folder:
        secret_file = Path(folder, "secret.json")
        secret_file.write_text(json.dumps({"const": _SECRET}))
        with live_server() as (base, _), httpx.Client(base_url=base, timeout=600) as client:
            session_id = client.post("/api/sessions", json=session).json()["id"]
            _measure(client, session_id, 0)  # warm: the prompt's forward pass, the workers
            idle = _measure(client, session_id, 100)
            # The same 8 threads sending a cached compile: what the load alone costs here.
            plain = _Flood(base, [("/api/compile", _grammar({"type": "integer"}))] * 8)
            loaded = plain.during(args.seconds, lambda: _measure(client, session_id, 200))
            hostile = _Flood(base, _hostile(listener_url, secret_file))
            attacked = hostile.during(args.seconds, lambda: _measure(client, session_id, 300))
            _replays(client)  # warm: its grammar compiled
            calm = _replays(client)
            walks = _Flood(base, [("/api/replay", _HOSTILE_REPLAY)] * 2, address="127.0.0.2")
            walked = walks.during(args.seconds, lambda: _replays(client))
    listener.shutdown()
    _ratios("under 8 plain (cached) compiles", idle, loaded)
    _ratios("under 8 hostile requests", idle, attacked)
    print(f"hostile answers: {dict(sorted(hostile.statuses.items()))}")
    calm_p50, during, worst = (
        statistics.median(calm[0]),
        statistics.median(walked[0]),
        max(walked[0]),
    )
    print(f"trivial replay p50 idle {calm_p50:.0f} ms, under 2 hostile replays of another client "
          f"p50 {during:.0f} ms (ratio {during / calm_p50:.2f}), max {worst:.0f} ms (ratio "
          f"{worst / calm_p50:.0f}: the wait for a replay thread, at most one walk budget); "
          f"their answers: {dict(sorted(walks.statuses.items()))}")  # fmt: skip
    print(f"listener connections: {_Listener.connections}; "
          f"file content answered: {hostile.leaked}")  # fmt: skip
    statuses = [*hostile.statuses, *walks.statuses]
    failed = any(int(key.rsplit(" ", 1)[1]) >= 500 for key in statuses)
    return 1 if failed or _Listener.connections or hostile.leaked else 0


if __name__ == "__main__":
    sys.exit(main())
