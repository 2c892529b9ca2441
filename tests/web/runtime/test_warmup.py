"""The warm-up after start (issue 45, item 3): with it on, once the app has loaded its model, the
tokenizer-only model loads, its compiler starts, and vLLM's tools builder compiles once on
qwen3.6, in the background, so that a first use finds them warm (the real default model, real
tokenizer, real vLLM builder runner, real xgrammar). The warm-up follows the app's own load: an
app built around a given engine (every other test's) warms nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings, TokenizerSpec
from app.web.runtime.warmup import VLLM_FIRST, VLLM_TOKENIZER
from tests.polling import wait_until

# The app loads the real model itself; vLLM's builder runs in a process of its own.
pytestmark = [pytest.mark.model, pytest.mark.server, pytest.mark.timeout(1200)]

#: what a cold start of each may take on a loaded machine (a hung test's cap, no measure)
BOUND_S = 540.0


def test_the_warm_up_loads_the_tokenizer_and_compiles_on_vllm_s_builder(tmp_path: Path) -> None:
    settings = Settings(
        db_path=tmp_path / "p.db",
        warm_up=True,
        tokenizers=[TokenizerSpec(id="qwen", tokenizer=VLLM_TOKENIZER)],
    )
    app = create_app(settings)
    with TestClient(app) as client:
        slot = app.state.maskscope.tokenizers.slots["qwen"]
        # Nothing asked for the model: only the warm-up loads it and compiles on it.
        wait_until(lambda: slot.engine is not None, "the tokenizer loaded", BOUND_S)
        assert slot.engine is not None
        warmed = slot.engine
        wait_until(
            lambda: warmed.cached(VLLM_FIRST) is not None,
            "vLLM's builder compiled on the tokenizer",
            BOUND_S,
        )
        ready = [m for m in client.get("/api/models").json() if m["id"] == "qwen"]
        assert ready and ready[0]["ready"] is True
        formats = client.get("/api/tool-formats").json()
        assert not any(f["name"] == "starting" for f in formats), formats
        assert any(f["builder"] == "vllm" and f["available"] for f in formats), formats
