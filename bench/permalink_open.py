"""A permalink opened: how soon its first chips are on the page, against the 1 s target.

One 48-step session is shared through the page's route (so its recorded trace is kept beside
the snapshot), then ``/s/{id}?step=36`` is fetched (its HTML holds the recorded chips: what the
browser paints at once) and the live session is rebuilt (``/ui/permalinks/{id}/open``: what the
page waited for before). Printed: both, their ratio, over a few rounds, in one run.

The live rebuild itself, before and after issue 45 (item 3): the trace's steps with a forward
pass each (``open_snapshot(..., batched=False)``, the rebuild before) against the recorded
tokens' passes run in one (the default), each the median of the rounds, and their ratio
(target >= 5x).

Then a permalink whose test walks a slow grammar (``root ::= root root | "a"``, issue 46),
shared before verdicts were kept: its first ``GET /api/permalinks/{id}`` answers pending, the
judgement runs in the background (what every GET cost before), and a later GET reads it.

Usage: ``PYTHONPATH=. .venv/bin/python bench/permalink_open.py [--rounds 3] [--steps 48]``
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.schemas.bodies import PermalinkIn
from app.web.services.permalinks import open_snapshot, snapshot_of_request
from tests.conftest import as_page
from tests.web.conftest import session_body

T = TypeVar("T")
TARGET_MS = 1000.0
SLOW_GRAMMAR = {"kind": "ebnf", "source": 'root ::= root root | "a"'}


def _ms(call: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1000, result


def slow_tests_row(client: TestClient, engine: Engine, chars: int) -> None:
    """The GET of a permalink whose test walks a slow grammar: pending, judged, read."""
    body = PermalinkIn.model_validate({**session_body(grammar=SLOW_GRAMMAR), "actions": []})
    tests = [{"text": "a" * chars, "expect": "pass", "recorded": None}]
    store = client.app.state.maskscope.store  # type: ignore[attr-defined]
    snapshot_id = store.put(snapshot_of_request(body, engine.model.identity, tests=tests))[0]
    path = f"/api/permalinks/{snapshot_id}"
    first_ms, first = _ms(lambda: client.get(path).json()["test_results"][0]["status"])
    start = time.perf_counter()
    while (status := client.get(path).json()["test_results"][0]["status"]) == "pending":
        time.sleep(0.02)
    judged_ms = (time.perf_counter() - start) * 1000
    read_ms = statistics.median(_ms(lambda: client.get(path))[0] for _ in range(5))
    print(
        f"slow grammar's test ({chars} chars): first GET {first_ms:.0f} ms ({first}), "
        f"judged in the background in {judged_ms:.0f} ms ({status}), later GET {read_ms:.0f} ms"
    )
    print(f"ratio (background judgement, once a GET before / GET now): {judged_ms / read_ms:.0f}x")


def rebuild_row(client: TestClient, snapshot_id: str, rounds: int) -> None:
    """The live session rebuilt step by step (before #45) and with the recorded tokens' forward
    passes in one (now), alternately, in the app's own loop: medians and their ratio."""
    state = client.app.state.maskscope  # type: ignore[attr-defined]
    snapshot = state.store.get(snapshot_id)[0]
    portal = client.portal
    assert portal is not None, "the client runs the app (a with block)"
    ways = {
        "step by step (before)": functools.partial(open_snapshot, state, snapshot, batched=False),
        "passes in one (now)": functools.partial(
            open_snapshot, state, snapshot, snapshot_id=snapshot_id
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            portal.call(way)
            times[name].append((time.perf_counter() - start) * 1000)
    medians = {name: statistics.median(ms) for name, ms in times.items()}
    for name, median in medians.items():
        print(f"live session rebuilt, {name}: {median:.0f} ms")
    before, now = medians.values()
    print(f"ratio (before / now): {before / now:.1f}x  (target >= 5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--slow-chars", type=int, default=300)
    args = parser.parse_args()
    settings = Settings(db_path=Path(tempfile.mkdtemp()) / "p.db")
    engine = Engine.load(settings)
    with TestClient(create_app(settings, engine=engine)) as client:
        as_page(client)
        body = session_body(max_tokens=args.steps + 8)
        session_id = client.post("/api/sessions", json=body).json()["id"]
        client.post(f"/api/sessions/{session_id}/step", json={"n": args.steps})
        html = client.post(f"/ui/sessions/{session_id}/share", headers={"HX-Request": "true"}).text
        snapshot_id = html.split('href="/s/')[1].split('"')[0]
        page_ms, open_ms = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            page = client.get(f"/s/{snapshot_id}?step=36").text
            page_ms.append((time.perf_counter() - start) * 1000)
            chips = page.split('id="recorded-tokens"')[1].split("</div>")[0].count('class="chip')
            start = time.perf_counter()
            client.post(f"/ui/permalinks/{snapshot_id}/open", data={"step": "36"})
            open_ms.append((time.perf_counter() - start) * 1000)
        page_median, open_median = statistics.median(page_ms), statistics.median(open_ms)
        print(f"{chips} recorded chips in the page of /s/{snapshot_id}?step=36")
        print(f"page with the recorded chips: {page_median:.0f} ms (target {TARGET_MS:.0f} ms)")
        print(f"live session rebuilt:         {open_median:.0f} ms")
        print(f"ratio (rebuilt / page):        {open_median / page_median:.1f}x")
        rebuild_row(client, snapshot_id, args.rounds)
        slow_tests_row(client, engine, args.slow_chars)
    engine.close()


if __name__ == "__main__":
    main()
