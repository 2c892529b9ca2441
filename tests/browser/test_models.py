"""The model picker in a real browser: a live server with the local model and a real ``vllm
serve`` of the same checkpoint, a session on each, picked in the setup form; and a permalink made
on a model this server does not have, opened on the picked one."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.engine import Engine
from app.settings import Settings
from app.store.permalinks import PermalinkStore
from tests.browser.conftest import ARTIFACTS
from tests.conftest import serve
from tests.engine.model.remote.conftest import spec_for
from tests.vllm_server import VllmServer
from tests.web.test_model_picker import snapshot_made_on

_READY_S = 180.0
_RUN_MS = 180_000
_STEPS = 6
STALE = re.compile(r"\bstale\b")


@pytest.fixture(scope="module")
def remote_server(engine: Engine, vllm_server: VllmServer) -> Iterator[str]:
    """The app with the remote engine ``vllm``, once both models are ready."""
    settings = Settings(remote_engines=[spec_for(vllm_server)], tokenizers=[])
    for url in serve(settings, engine):
        deadline = time.monotonic() + _READY_S
        while not all(m["ready"] for m in httpx.get(f"{url}/api/models").json()):
            assert time.monotonic() < deadline, httpx.get(f"{url}/api/models").json()
            time.sleep(0.5)
        yield url


def _run(page: Page) -> list[str]:
    """Run a new session from the form to its end (``_STEPS`` tokens): the chips' texts."""
    session = page.locator("#session")
    before = session.get_attribute("data-session-id") if session.count() else None
    page.fill('input[name="max_tokens"]', str(_STEPS))
    page.click("#btn-run")
    fresh = f"#session:not([data-session-id='{before}'])" if before else "#session"
    expect(page.locator(fresh)).to_have_count(1, timeout=_RUN_MS)
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=_RUN_MS)
    expect(page.locator("#tokens .chip")).to_have_count(_STEPS)
    expect(page.locator("#session-area")).not_to_have_class(STALE)
    return page.locator("#tokens .chip").all_inner_texts()


@pytest.mark.remote
def test_the_picker_runs_a_session_on_the_remote_engine_then_on_the_local_model(
    page: Page, remote_server: str
) -> None:
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url))
    page.goto(f"{remote_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    expect(page.locator("#model option[value=vllm]")).to_be_enabled()
    expect(page.locator("#model option[value=vllm]")).to_have_text("vllm · smollm2-135m-instruct")
    expect(page.locator("#footer-model")).to_contain_text("local")

    with page.expect_response(lambda r: r.url.endswith("/ui/compile")) as compiled:
        page.select_option("#model", "vllm")
    assert compiled.value.ok and "model=vllm" in (compiled.value.request.post_data or "")
    expect(page.locator("#preset")).to_have_value("maskscope")  # the model is not an option
    remote_tokens = _run(page)
    expect(page.locator("#footer-model")).to_have_text("model vllm · smollm2-135m-instruct")
    expect(page.locator("#footer")).to_contain_text("vLLM 0.32.0")

    _search_first_token(page, "vllm", sent)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "model-picker-remote.png"))

    page.select_option("#model", "local")
    expect(page.locator("#session-area")).to_have_class(STALE)
    local_tokens = _run(page)
    expect(page.locator("#footer-model")).to_contain_text(
        "model local · HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    expect(page.locator("#footer")).not_to_contain_text("vLLM")
    assert local_tokens == remote_tokens  # greedy, the same checkpoint: the same tokens
    _search_first_token(page, "local", sent)


def test_a_permalink_on_a_missing_model_opens_on_the_picked_one_when_asked(
    page: Page, engine: Engine, tmp_path: Path
) -> None:
    db_path = tmp_path / "permalinks.db"
    snapshot = snapshot_made_on(engine, "elsewhere", served_name="big-model")
    snapshot_id, _ = PermalinkStore(db_path).put(snapshot)
    for url in serve(Settings(db_path=db_path), engine):
        page.goto(f"{url}/s/{snapshot_id}")
        banner = page.locator("#permalink-banner")
        expect(banner).to_contain_text("shared with 'elsewhere', which is not configured")
        expect(banner).to_contain_text("its tokens and figures")
        expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
        expect(page.locator("#session")).to_have_count(0)  # not opened: it would be refused
        expect(page.locator("#model")).to_have_value("local")
        page.click("#btn-open-elsewhere")
        expect(page.locator("#tokens .chip")).to_have_count(4, timeout=_RUN_MS)
        expect(page.locator("#footer-model")).to_contain_text("model local")
        expect(page.locator("#inspector")).to_have_attribute("data-index", "3")
        expect(page.locator("#toast")).to_be_empty()


def _search_first_token(page: Page, model: str, sent: list[str]) -> None:
    """Open the first token in the inspector and search the vocabulary of ``model`` for ``{``.

    ``sent``: the URLs the page requested. The vocabulary of ``model`` is fetched once, by the
    background prefetch when the picker changes (page-layout) or when the inspector needs it.
    """
    page.click("#tok-0")
    expect(page.locator("#inspector")).to_have_attribute("data-model", model)
    expect(page.locator("#inspector")).to_have_attribute("data-index", "0")
    for _ in range(120):
        if any(f"/api/vocab?model={model}" in url for url in sent):
            break
        page.wait_for_timeout(250)
    assert any(f"/api/vocab?model={model}" in url for url in sent), sent
    page.fill("#token-search", "{")
    results = page.locator("#search-results li")
    for _ in range(5):  # a late swap may draw the inspector again, empty: type again
        if results.count():
            break
        page.wait_for_timeout(500)
        page.fill("#token-search", "{")
    expect(results.first).to_contain_text("allowed")
    assert sum(f"/api/vocab?model={model}" in url for url in sent) == 1  # once per model
