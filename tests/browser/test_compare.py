"""Compare mode in a real browser: the divergence on the timeline, the follower in the inspector,
the engine picker, and the replay panel's second verdict."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS

# llguidance accepts JSON's "-0", xgrammar 0.2.9 does not (tests/engine/masking/test_compare.py):
# forced
# "-" then "0" under llguidance, the xgrammar follower diverges and ends at step 1.
INTEGER = {"kind": "json_schema", "source": '{"type": "integer"}', "engine": "llguidance"}


def _ids(live_server: str, *texts: str) -> list[int]:
    vocab: list[str] = httpx.get(f"{live_server}/api/vocab", timeout=60).json()["tokens"]
    return [vocab.index(text) for text in texts]


def test_a_divergence_is_marked_on_the_timeline_and_in_the_inspector(
    page: Page, live_server: str
) -> None:
    minus, zero = _ids(live_server, "-", "0")
    body = {
        "grammar": INTEGER, "raw_prompt": "n =", "max_tokens": 4, "compare": "xgrammar",
        "actions": [{"op": "force", "token_id": minus}, {"op": "force", "token_id": zero},
                    {"op": "step", "n": 1}],
    }  # fmt: skip
    snapshot_id = httpx.post(f"{live_server}/api/permalinks", json=body, timeout=60).json()["id"]
    page.goto(f"{live_server}/s/{snapshot_id}")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    expect(page.locator("#engine")).to_have_value("llguidance")
    expect(page.locator("#compare")).to_be_checked()
    expect(page.locator("#tok-0")).to_have_attribute("data-diverged", "false")
    expect(page.locator("#tok-1")).to_have_attribute("data-diverged", "true")
    expect(page.locator("#tok-1")).to_have_attribute("data-follower-ended", "true")
    expect(page.locator("#timeline")).to_have_attribute("data-first-divergence", "1")
    violet = page.evaluate(
        """() => {
            const canvas = document.querySelector('#timeline');
            const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, 2).data;
            let n = 0;
            for (let i = 0; i < data.length; i += 4) {
                if (data[i] === 124 && data[i + 1] === 58 && data[i + 2] === 237) n++;
            }
            return n;
        }"""
    )
    assert violet > 0
    page.click("#tok-1")
    follower = page.locator("#inspector #follower")
    expect(follower).to_contain_text("xgrammar following llguidance")
    expect(follower).to_contain_text("xgrammar ended at step 1")
    expect(follower.locator(".follower-differences")).to_contain_text("0")
    page.click("#tok-0")
    expect(page.locator("#inspector #follower")).to_contain_text("The two masks agree here")
    page.screenshot(path=str(ARTIFACTS / "compare-divergence.png"))


def test_the_replay_panel_shows_the_other_engines_verdict(page: Page, live_server: str) -> None:
    # xgrammar 0.2.9 takes a raw DEL (0x7F, which JSON allows unescaped) in a string,
    # llguidance 1.7.6 refuses it: the driver accepts so far, the follower refuses at the DEL.
    text = '{"user": {"id": 4, "profile": {"display_name": "a\x7f'
    page.goto(f"{live_server}/?example=nested")
    page.check("#compare")
    page.click("label.tab:has(input[value=replay])")
    page.fill("#replay-text", text)
    page.click("#btn-replay")
    expect(page.locator("#replay-result .verdict").first).to_contain_text("accepted so far")
    follower = page.locator("#replay-follower")
    expect(follower).to_contain_text("llguidance")
    expect(follower).to_contain_text(f"refused at offset {text.index(chr(0x7F))}")
