"""The page's speed in a real browser, against a live server on loopback.

1. Step latency: click Step, time until the step's chip is in the page (measured in the page with
   a MutationObserver), compared with the forward pass of that step (from its record).
   Target: p50 <= p50(forward) + 30 ms.
2. Run throughput: tokens per second arriving in the page over SSE during a Run, compared with the
   stepper's own tokens per second for the same steps (steps / time inside ``step()``).
   Target: >= 0.9x.

3. First use (#26): the first token search after load (the vocabulary, fetched in the
   background after load, is there already), and a permalink: the time to its progress note,
   to its chips, and to the shared step (``?step=``) inspected. Target: the progress shows
   within 1 s (the chips come when the session is rebuilt: the replay's own time).

4. First use against warm (#45, item 3), each figure printed beside its warm one: a shipped
   tokenizer's first compile (its load included) and vLLM's tools builder's first compile on
   that tokenizer (qwen3.6), on a server that warms nothing (``MASKSCOPE_WARM_UP=0``, the first
   use waits) and on one that warms them in the background after start (the default), against
   the same compile warm; a permalink shared from the page (48 steps, its records kept) opened
   as a live session, the first time and again; and the format picker changed 8 times in a
   row on the page: the 429s it got (target 0, one compile in flight per person: a replaced
   request leaves the queue).

Usage: ``.venv/bin/python bench/web_latency.py [--steps 30] [--first-use-only]`` (needs
/usr/bin/chromium; the first-use part needs vLLM's virtualenv, ``make vllm-install``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
from live_server import live_server
from playwright.sync_api import Page, sync_playwright

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
WAIT_FOR_CHIP = """(index) => new Promise((resolve) => {
    const area = document.querySelector('#session-area');
    const start = performance.now();
    const seen = () => document.querySelector('#tok-' + index);
    const observer = new MutationObserver(() => {
        if (seen()) { observer.disconnect(); resolve(performance.now() - start); }
    });
    observer.observe(area, {childList: true, subtree: true});
    document.querySelector('#btn-step').click();
})"""
RUN_ARRIVALS = """() => new Promise((resolve) => {
    const times = [];
    const observer = new MutationObserver((mutations) => {
        for (const m of mutations) for (const n of m.addedNodes)
            if (n.classList && n.classList.contains('chip')) times.push(performance.now());
    });
    observer.observe(document.querySelector('#session-area'), {childList: true, subtree: true});
    const status = () => document.querySelector('#status');
    const poll = setInterval(() => {
        const running = document.body.classList.contains('running');
        if (status() && status().dataset.done === 'true' && !running) {
            clearInterval(poll); observer.disconnect(); resolve(times);
        }
    }, 20);
    document.querySelector('#btn-run').click();
})"""


def _session_steps(base: str, page: Page) -> list[dict[str, float]]:
    session_id = page.locator("#session").get_attribute("data-session-id")
    steps: list[dict[str, float]] = httpx.get(f"{base}/api/sessions/{session_id}").json()["steps"]
    return steps


FIRST_SEARCH = """() => new Promise((resolve) => {
    const search = document.querySelector('#token-search');
    const start = performance.now();
    const poll = setInterval(() => {
        if (document.querySelector('#search-results li')) {
            clearInterval(poll); resolve(performance.now() - start);
        }
    }, 5);
    search.value = '{';
    search.dispatchEvent(new Event('input'));
})"""


def _first_use(base: str, page: Page) -> dict[str, float]:
    """Milliseconds: the first search after load, and a permalink's progress, chips and step."""
    page.goto(f"{base}/?example=nested")
    page.wait_for_selector("#compile-result .stats")
    vocab_ms = page.evaluate(
        "() => performance.getEntriesByType('resource')"
        ".filter((e) => e.name.includes('/api/vocab')).map((e) => e.duration)[0] ?? NaN"
    )
    page.click("#btn-step")
    page.wait_for_selector("#inspector #token-search")
    search_ms = page.evaluate(FIRST_SEARCH)
    body = {"grammar": {"kind": "regex", "source": "[a-z ]{400}"}, "raw_prompt": "A story:",
            "max_tokens": 60, "actions": [{"op": "step", "n": 48}]}  # fmt: skip
    snapshot_id = httpx.post(f"{base}/api/permalinks", json=body, timeout=120).json()["id"]
    page.goto(f"{base}/s/{snapshot_id}?step=36", wait_until="commit")
    page.wait_for_selector("#replaying")
    progress_ms = page.evaluate("() => performance.now()")
    page.wait_for_selector("#tok-47")
    chips_ms = page.evaluate("() => performance.now()")
    page.wait_for_selector('#inspector[data-index="36"]')
    step_ms = page.evaluate("() => performance.now()")
    return {"vocab": vocab_ms, "search": search_ms, "progress": progress_ms,
            "chips": chips_ms, "step": step_ms}  # fmt: skip


TOOLS = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "router_tools.tools.json")
                   .read_text())  # fmt: skip


def _compile_ms(base: str, model: str, source: dict[str, object]) -> float:
    """Milliseconds until ``/api/compile`` answers 200 for ``source`` on ``model`` (a model
    still loading answers 503: asked again until it is ready)."""
    body = {"kind": "tools", "source": json.dumps(source), "model": model}
    start = time.perf_counter()
    while True:
        answer = httpx.post(f"{base}/api/compile", json=body, timeout=300)
        if answer.status_code == 200:
            return (time.perf_counter() - start) * 1000
        assert answer.status_code == 503, answer.text
        time.sleep(0.2)


def _first_and_warm(base: str) -> dict[str, tuple[float, float]]:
    """(first use, warm) milliseconds: the qwen3.6 tokenizer's compile, vLLM's builder's."""
    first_tokenizer = _compile_ms(base, "qwen3.6", TOOLS)
    warm_tokenizer = _compile_ms(base, "qwen3.6", {**TOOLS, "tool_choice": "auto"})
    vllm = {**TOOLS, "builder": "vllm", "format": "hermes"}
    first_vllm = _compile_ms(base, "qwen3.6", vllm)
    warm_vllm = _compile_ms(base, "qwen3.6", {**vllm, "tool_choice": "auto"})
    return {"qwen3.6 tokenizer, first compile": (first_tokenizer, warm_tokenizer),
            "vLLM builder on qwen3.6, first compile": (first_vllm, warm_vllm)}  # fmt: skip


SHARED = """async (steps) => {
    const token = document.querySelector('meta[name="csrf-token"]').content;
    const json = {'Content-Type': 'application/json', 'X-CSRF-Token': token};
    const body = {grammar: {kind: 'regex', source: '[a-z ]{400}'}, raw_prompt: 'A story:',
                  max_tokens: steps + 12};
    const opened = await fetch('/api/sessions', {method: 'POST', headers: json,
                                                 body: JSON.stringify(body)});
    const id = (await opened.json()).id;
    await fetch(`/api/sessions/${id}/step`, {method: 'POST', headers: json,
                                              body: JSON.stringify({n: steps})});
    const shared = await fetch(`/ui/sessions/${id}/share`, {method: 'POST',
        headers: {'X-CSRF-Token': token, 'HX-Request': 'true'}});
    return (await shared.text()).split('href="/s/')[1].split('"')[0];
}"""


def _permalink_rebuild(base: str, page: Page, steps: int = 48) -> tuple[float, float]:
    """(first, again) milliseconds: a permalink shared from the page (its records kept, as
    the page's Share keeps them) opened as a live session, ``POST /api/permalinks/{id}/session``."""
    page.goto(f"{base}/")
    snapshot_id = page.evaluate(SHARED, steps)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        opened = httpx.post(f"{base}/api/permalinks/{snapshot_id}/session", timeout=300)
        assert opened.status_code in (200, 201), opened.text
        assert len(opened.json()["steps"]) == steps
        times.append((time.perf_counter() - start) * 1000)
    return times[0], times[1]


def _picker_churn(base: str, page: Page) -> tuple[int, int]:
    """vLLM's format picker changed 8 times in a row: (compile answers, of them 429)."""
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if "/compile" in r.url else None)
    page.goto(f"{base}/?example=router_tools")
    page.wait_for_selector("#compile-result .stats", state="attached")
    page.select_option("#tools-builder", "vllm")  # seconds a compile: changes overtake them
    page.wait_for_selector("#compile-result .stats", state="attached")
    options = "#tools-format option:not([disabled])"
    names = page.eval_on_selector_all(options, "(os) => os.map((o) => o.value).filter(Boolean)")
    for name in names[:8]:
        page.select_option("#tools-format", name)
        page.wait_for_timeout(400)  # past the compile's debounce: each change sends one
    page.wait_for_timeout(3000)
    return len(statuses), statuses.count(429)


def _ready(base: str) -> None:
    """Until every model and the vLLM builder are ready (what the warm-up started)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            models = httpx.get(f"{base}/api/models", timeout=30).json()
            formats = httpx.get(f"{base}/api/tool-formats", timeout=30).json()
        except httpx.TimeoutException:  # a loaded machine while everything warms: ask again
            continue
        if all(m["ready"] for m in models) and not any(f["name"] == "starting" for f in formats):
            return
        time.sleep(1)


def first_use() -> None:
    """Part 4: print each first-use figure against its warm one."""
    with live_server({"MASKSCOPE_WARM_UP": "0"}) as (base, _):
        cold = _first_and_warm(base)
    with live_server() as (base, _):
        _ready(base)
        warmed = _first_and_warm(base)
        for name, (first, warm) in cold.items():
            after = warmed[name][0]
            print(f"{name}: first use {first:.0f} ms without warm-up, {after:.0f} ms after the "
                  f"background warm-up; warm {warm:.0f} ms (first/warm: {first / warm:.1f}x "
                  f"without, {after / warm:.1f}x with)", flush=True)  # fmt: skip
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            first, again = _permalink_rebuild(base, page)
            print(f"permalink's live session (48 steps, shared from the page): first open "
                  f"{first:.0f} ms, again {again:.0f} ms (first/again: {first / again:.1f}x)",
                  flush=True)  # fmt: skip
            answers, refused = _picker_churn(base, page)
            browser.close()
    print(f"vLLM format picker changed 8 times: {answers} compile answers, {refused} of them "
          "429 (target 0)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--first-use-only", action="store_true", help="only part 4")
    args = parser.parse_args()
    if args.first_use_only:
        first_use()
        return 0
    with live_server({"MASKSCOPE_COMPILE_WORKERS": "1"}) as (base, _):
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{base}/?example=pricing")
            page.wait_for_selector("#compile-result .stats")
            page.fill('input[name="max_tokens"]', "400")
            latencies = [page.evaluate(WAIT_FOR_CHIP, i) for i in range(args.steps)]
            steps = _session_steps(base, page)
            # Step 0 also opened the session and prefilled the prompt: leave it out.
            click = statistics.median(latencies[1:])
            forward = statistics.median(s["forward_ms"] for s in steps[1 : args.steps])

            page.click("#btn-reset")
            arrivals = page.evaluate(RUN_ARRIVALS)
            steps = _session_steps(base, page)
            first = _first_use(base, page)
            browser.close()

    n = len(arrivals)
    page_rate = (n - 1) / ((arrivals[-1] - arrivals[0]) / 1000)
    stepper_rate = (len(steps) - 1) / (sum(s["total_ms"] for s in steps[1:]) / 1000)
    print(
        f"step clicks measured: {len(latencies) - 1} (the first, which opens the session, left out)"
    )
    print(f"click -> chip in page: p50 {click:.1f} ms, p95 "
          f"{statistics.quantiles(latencies[1:], n=20)[-1]:.1f} ms")  # fmt: skip
    print(f"forward pass of those steps: p50 {forward:.1f} ms")
    print(f"overhead over the forward pass: {click - forward:.1f} ms  (target <= 30 ms)")
    print(f"run over SSE: {n} tokens, {page_rate:.1f} tokens/s arriving in the page")
    print(f"stepper's own rate for those steps: {stepper_rate:.1f} tokens/s")
    print(f"ratio page / stepper: {page_rate / stepper_rate:.3f}  (target >= 0.9)")
    print(f"first token search after load: {first['search']:.1f} ms (the vocabulary, fetched in "
          f"the background after load, took {first['vocab']:.0f} ms; 0 or a few ms: from "
          "the browser's cache)")  # fmt: skip
    print(f"permalink (48 steps, ?step=36), from navigation: progress shown at "
          f"{first['progress']:.0f} ms (target <= 1000), chips at {first['chips']:.0f} ms, "
          f"step #36 inspected at {first['step']:.0f} ms")  # fmt: skip
    first_use()
    return 0


if __name__ == "__main__":
    sys.exit(main())
