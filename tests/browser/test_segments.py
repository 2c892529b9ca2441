"""A structural tag's segments as timeline bands, and the steps no mask applied to (the
reasoning, under ``mask_after_end``), in a real browser on a permalink of a real session."""

from __future__ import annotations

import re

import httpx
import pytest
import xgrammar as xgr
from playwright.sync_api import Page, expect

from tests.browser.conftest import shot

pytestmark = pytest.mark.usefixtures("patient")

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_bands_and_unmasked_steps_on_the_timeline(page: Page, live_server: str) -> None:
    tag = xgr.get_model_structural_tag("qwen_3", tools=TOOLS, reasoning="enabled")
    forced = 'Paris.</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
    ids = httpx.post(
        f"{live_server}/api/replay",
        json={"grammar": {"kind": "regex", "source": ".*"}, "text": forced},
        timeout=60,
    ).json()["tokens"]
    body = {
        "grammar": {"kind": "structural_tag", "source": tag.model_dump_json()},
        "raw_prompt": PROMPT, "max_tokens": 40, "reasoning": "mask_after_end",
        "actions": [*({"op": "force", "token_id": t["token_id"]} for t in ids),
                    {"op": "step", "n": 6}],
    }  # fmt: skip
    answer = httpx.post(f"{live_server}/api/permalinks", json=body, timeout=120)
    assert answer.status_code in (200, 201), answer.text
    page.goto(f"{live_server}/s/{answer.json()['id']}")
    expect(page.locator(f"#tok-{len(ids) + 5}")).to_be_visible()
    expect(page.locator("#reasoning")).to_have_value("mask_after_end")
    expect(page.locator("#tok-0")).to_have_attribute("data-masked", "false")
    expect(page.locator("#tok-0")).to_have_attribute("data-segment", "reasoning")
    expect(page.locator("#tok-0")).to_have_class(re.compile(r"\bunmasked\b"))
    last = page.locator(f"#tok-{len(ids) + 5}")
    expect(last).to_have_attribute("data-masked", "true")
    expect(last).to_have_attribute("data-segment", "arguments")
    timeline = page.locator("#timeline")
    expect(timeline).to_have_attribute(
        "data-segments", re.compile(r"^reasoning:0-\d+,.*arguments:")
    )
    # the steps begun before "</think>" was whole: unmasked (the one completing it included)
    boundary = forced.find("</think>") + len("</think>")
    starts = [sum(len(t["text"]) for t in ids[:i]) for i in range(len(ids))]
    expect(timeline).to_have_attribute(
        "data-unmasked", str(sum(1 for start in starts if start < boundary))
    )
    expect(page.locator(".timeline-legend .segments")).to_be_visible()
    shot(page, "timeline-segments")
