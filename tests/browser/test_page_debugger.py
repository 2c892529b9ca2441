"""The page as a debugger (issue 45's C3, C8, C13, C15 and M5; issue 42's empty mask, end rules
and class strip): one test per item, on one server and one page for the module. Screenshots at
1440x900 and 1280x720 go to test-artifacts/."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from app.engine import Engine
from app.engine.mask_summary import CLASS_KEYS, CLASS_LABELS
from tests.browser.conftest import shot
from tests.browser.shared_page import (
    PATTERN_AND_LENGTH,
    SMALL,
    WIDE,
    Shared,
    compiled,
    in_view,
    raised_nothing,
    shared_page,
    steps,
)

pytestmark = pytest.mark.usefixtures("patient")

PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
# A free reasoning block closed by </think>, then a tag opened by "</": the default model's
# single token "></" after "</think" ends the marker with ">" and opens the tag with "</".
FREE_AFTER = json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": [
    {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"},
    {"type": "tag", "begin": "</", "content": {"type": "any_text"}, "end": "!"}]}})  # fmt: skip
# A document that is over after `"yes"`: only a stop may follow.
TERMINAL = json.dumps({"enum": ["yes"]})


@pytest.fixture(scope="module")
def shared(browser: Browser) -> Iterator[Shared]:
    for one in shared_page(browser):
        yield one
        raised_nothing(one)


def _permalink(server: str, body: dict[str, Any]) -> str:
    shared = httpx.post(f"{server}/api/permalinks", json=body, timeout=120)
    assert shared.status_code == 201, shared.text
    return f"{server}/s/{shared.json()['id']}"


def _session_answer(page: Page) -> dict[str, Any]:
    """The page's session as the API answers it."""
    session = page.locator("#session").get_attribute("data-session-id")
    answer: dict[str, Any] = page.evaluate(
        "(id) => fetch(MS.url(`/api/sessions/${id}`)).then((r) => r.json())", session
    )
    return answer


def _run_to_the_end(page: Page) -> None:
    page.click("#btn-run")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=180_000)


def test_c3_the_token_that_straddles_the_reasoning_end_is_marked_and_explained(
    shared: Shared, live_server: str, engine: Engine
) -> None:
    tokens = engine.model.tokens
    before = tokens.encode("ok </think")
    straddle = tokens.encode("></")
    assert len(straddle) == 1, "the default model has a single ></ token"
    forces = [{"op": "force", "token_id": t} for t in [*before, *straddle]]
    url = _permalink(live_server, {
        "grammar": {"kind": "structural_tag", "source": FREE_AFTER}, "raw_prompt": PROMPT,
        "max_tokens": 24, "reasoning": "mask_after_end", "actions": forces,
    })  # fmt: skip
    page = shared.fresh(url)
    at = len(before)
    chip = page.locator(f"#tok-{at}")
    # a cold server compiles the tag, then rebuilds the session: on a busy machine, a while
    expect(chip).to_have_class(re.compile(r"\bstraddle\b"), timeout=180_000)
    expect(page.locator("#tokens .chip.straddle")).to_have_count(1)
    assert "STRADDLES </think>" in (chip.get_attribute("title") or "")
    expect(page.locator("#timeline")).to_have_attribute("data-straddles", str(at))
    expect(page.locator(".timeline-legend .flag-straddle")).to_be_visible()
    chip.click()
    row = page.locator("#inspector .straddle-row")
    expect(row).to_contain_text("ends </think>")
    expect(row.locator(".straddle-before")).to_have_text(">")
    expect(row.locator(".straddle-after")).to_have_text("</")
    shot(page, "c3-straddle-1440x900")


def test_c8_the_replay_text_belongs_to_its_setup(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    page.click('label.tab:has(input[value="replay"])')
    page.fill("#replay-text", '{"pricing": "one"}')
    page.fill("#replay-ids", "198")
    # another kind: a setup never seen starts from what the boxes hold, then keeps its own
    page.click('label.tab:has(input[value="regex"])')
    compiled(page)
    expect(page.locator("#replay-text")).to_have_value('{"pricing": "one"}')
    page.fill("#replay-text", "abc-123")
    page.fill("#replay-ids", "")
    page.click('label.tab:has(input[value="json_schema"])')
    compiled(page)
    expect(page.locator("#replay-text")).to_have_value('{"pricing": "one"}')
    expect(page.locator("#replay-ids")).to_have_value("198")
    # another preset is another setup, and so is another example
    page.select_option("#preset", "vllm")
    page.fill("#replay-text", '{"preset": "vllm"}')
    page.select_option("#preset", "maskscope")
    expect(page.locator("#replay-text")).to_have_value('{"pricing": "one"}')
    page.click('label.tab:has(input[value="regex"])')
    compiled(page)
    expect(page.locator("#replay-text")).to_have_value("abc-123")
    page.click('label.tab:has(input[value="json_schema"])')
    compiled(page)
    page.select_option("#example", "nested")
    compiled(page)
    page.fill("#replay-text", '{"nested": true}')
    page.select_option("#example", "pricing")
    compiled(page)
    expect(page.locator("#replay-text")).to_have_value('{"pricing": "one"}')
    page.fill("#replay-ids", "")
    page.click('label.tab:has(input[value="generate"])')


def test_c13_a_witness_marks_the_value_the_schema_rejects(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    page.evaluate("(text) => MS.setSource(text)", PATTERN_AND_LENGTH)
    compiled(page)
    page.click('.compile-panel .tab-button[data-view="doctor"]')
    # the Doctor searches after the compile: on a busy machine, a while
    expect(page.locator("#doctor-result .doctor-backends")).to_be_visible(timeout=180_000)
    witness = page.locator("#doctor-result .witness.grammar_accepts_schema_rejects").first
    expect(witness).to_contain_text("is too long")
    mark = witness.locator(".witness-text mark.offending")
    expect(mark).to_have_attribute("data-path", "$.id")
    marked = json.loads(mark.inner_text())
    document = json.loads(witness.locator(".witness-text").inner_text())
    assert marked == document["id"] and len(marked) > 8, (marked, document)
    assert "is too long" in (mark.get_attribute("title") or "")
    shot(page, "c13-witness-mark-1440x900")
    page.click('.compile-panel .tab-button[data-view="compile"]')


# The tops of each shown legend group's shown entries: a group is on one line when they are equal.
LEGEND_LINES = """() => {
  const groups = [...document.querySelectorAll('.timeline-legend > .legend-group')]
    .filter((g) => !g.hidden);
  return groups.map((g) => [...g.children].filter((c) => !c.hidden)
    .map((c) => Math.round(c.getBoundingClientRect().top)));
}"""


def test_c15_a_taller_timeline_with_its_legend_on_clean_lines(
    shared: Shared, live_server: str
) -> None:
    # taller from 900 px up (it was 64 px); at 720 px there is no height to spare (B9)
    for viewport, example, least, name in (
        (WIDE, "router_tools", 96, "1440x900"),
        (SMALL, "pricing", 62, "1280x720"),  # clientHeight: 64 px less its borders
    ):
        page = shared.example(live_server, example, viewport)
        page.fill('input[name="max_tokens"]', "40")
        _run_to_the_end(page)
        height = page.evaluate("() => document.querySelector('#timeline').clientHeight")
        assert height >= least, (name, height)
        lines = page.evaluate(LEGEND_LINES)
        assert len(lines) >= 2, lines
        for group in lines:
            assert len(set(group)) == 1, (name, lines)  # a group never split over two lines
        in_view(page, "#timeline")
        if viewport == WIDE:
            in_view(page, ".timeline-legend")
        shot(page, f"c15-timeline-{name}")
    page.set_viewport_size(WIDE)


def test_m5_recorded_steps_are_inspectable_while_the_permalink_rebuilds(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    page.fill('input[name="max_tokens"]', "40")
    _run_to_the_end(page)
    total = page.locator("#tokens .chip").count()
    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    url = link.get_attribute("data-url")
    assert url
    held: list[Route] = []
    page.route("**/ui/permalinks/*/open", lambda route: held.append(route))
    try:
        page.goto(url)
        for _ in range(1200):
            if held:
                break
            page.wait_for_timeout(50)
        assert held, "the page never opened the permalink's session"
        # the server rebuilds the session meanwhile; the page follows it, its chips recorded
        answer = held[0].fetch(timeout=180_000)
        bar = page.locator("#replaying progress")
        expect(bar).to_have_attribute("max", str(total))
        # the rebuild is over on the server: the page's next poll finds its final count
        page.wait_for_function(
            "(total) => document.querySelector('#replaying progress').value === total", arg=total
        )
        page.locator("#rec-3").click()
        inspector = page.locator("#inspector[data-recorded]")
        expect(inspector).to_have_attribute("data-index", "3")
        expect(inspector).to_contain_text("Recorded step #3")
        expect(page.locator("#rec-3")).to_have_class(re.compile(r"\bselected\b"))
        shot(page, "m5-recorded-inspector-1440x900")
        held[0].fulfill(response=answer)
    finally:
        page.unroute("**/ui/permalinks/*/open")
    # the live session opens the step picked meanwhile
    expect(page.locator("#inspector[data-session]")).to_have_attribute("data-index", "3")
    expect(page.locator("#tok-3")).to_have_class(re.compile(r"\bselected\b"))


def test_empty_mask_is_flagged_on_the_chip_and_the_timeline(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    page.evaluate("(text) => MS.setSource(text)", TERMINAL)
    compiled(page)
    page.fill("#min-tokens", "12")
    _run_to_the_end(page)
    flagged = page.locator("#tokens .chip.empty-mask")
    expect(flagged).to_have_count(1)
    index = flagged.get_attribute("data-index")
    assert "EMPTY MASK: vLLM aborts this request" in (flagged.get_attribute("title") or "")
    expect(page.locator("#timeline")).to_have_attribute("data-empty-masks", str(index))
    expect(page.locator(".timeline-legend .flag-empty")).to_be_visible()
    end = _session_answer(page)["end"]
    assert [e["step"] for e in end["empty_masks"]] == [int(index or -1)]
    flagged.click()
    expect(page.locator("#inspector .empty-mask-row")).to_contain_text(
        "empty mask: vLLM aborts this request"
    )
    shot(page, "empty-mask-1440x900")
    page.fill("#min-tokens", "")


def test_end_rules_reach_the_session_from_the_options_bar(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    page.fill("#min-tokens", "2")
    page.fill("#stop-token-ids", "7, 9")
    page.fill("#stop-strings", "zzz-never\nqqq-never")
    steps(page, 1)
    end = _session_answer(page)["end"]
    assert end["min_tokens"] == 2 and end["stop_token_ids"] == [7, 9], end
    assert end["stop"] == ["zzz-never", "qqq-never"], end
    first = page.locator("#session").get_attribute("data-session-id")
    # an id that is no integer: refused with the field named, nothing opened
    page.fill("#stop-token-ids", "7, x")
    page.click("#btn-step")
    expect(page.locator("#toast")).to_contain_text("stop_token_ids")
    expect(page.locator("#session")).to_have_attribute("data-session-id", str(first))
    for field in ("#min-tokens", "#stop-token-ids", "#stop-strings"):
        page.fill(field, "")
    page.click("#btn-step")  # the rules changed: a new session, without them
    expect(page.locator("#session")).not_to_have_attribute("data-session-id", str(first))
    expect(page.locator("#tokens .chip")).to_have_count(1)
    assert "end" not in _session_answer(page)
    in_view(page, "#stop-strings")
    shot(page, "end-rules-1440x900")


def test_classes_strip_is_drawn_on_the_timeline(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    steps(page, 4)
    canvas = page.locator("#timeline")
    expect(canvas).to_have_attribute("data-classes", re.compile(r"^(\d+:[\d./]+,){3}"))
    drawn = (canvas.get_attribute("data-classes") or "").split(",")
    assert [entry.split(":")[0] for entry in drawn] == ["0", "1", "2", "3"], drawn
    # every class the records count is a row, in the legend's order, with the inspector's words
    keys = (canvas.get_attribute("data-class-keys") or "").split(",")
    assert keys == list(CLASS_KEYS)
    legend = page.locator(".timeline-legend .classes [data-class]")
    expect(legend).to_have_count(len(CLASS_KEYS))
    titles = [legend.nth(i).get_attribute("title") for i in range(len(CLASS_KEYS))]
    assert titles == [f"allowed tokens {CLASS_LABELS[key]}" for key in CLASS_KEYS]
    records = _session_answer(page)["steps"]
    for entry, record in zip(drawn, records, strict=True):
        shares = [float(x) for x in entry.split(":")[1].split("/")]
        allowed = record["allowed_count"]
        expected = [min(record["classes"][key] / allowed, 1) for key in CLASS_KEYS]
        assert shares == pytest.approx(expected, abs=1e-3), (entry, record["classes"])
