"""Tools sources are parsed on the bounded ``parses`` pool, with the per-client caps: a flood of
big sources from one client gets 429s past its share, while another client's request is served
(on the real model and app, in-process clients with addresses of their own)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.engine import Engine
from app.examples import load_tool_examples
from app.main import create_app
from app.settings import Settings
from app.web.runtime.state import AppState
from tests import asyncrun

ROUTER_TOOLS = json.loads(next(e for e in load_tool_examples() if e.id == "router_tools").source())
FLOOD = 12


def big_source(settings: Settings) -> dict[str, Any]:
    """A tools source just under the size limit: thousands of small tools (a second of CPU to
    parse), and a ``tool_choice`` naming none of them, so that it ends in a 422 once parsed."""
    data = copy.deepcopy(ROUTER_TOOLS)
    data["tool_choice"] = {"type": "function", "function": {"name": "nowhere"}}
    tool = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 9}}}
    data["tools"] = []
    while len(json.dumps(data)) < settings.source_max_bytes - 200:
        index = len(data["tools"])
        data["tools"].append({"type": "function",
                              "function": {"name": f"t{index}", "parameters": tool}})  # fmt: skip
    return {"kind": "tools", "source": json.dumps(data)}


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """One parse at a time, two more waiting per client, four in all."""
    directory: Path = tmp_path_factory.mktemp("parses")
    settings = Settings(
        db_path=directory / "p.db", cache_dir=directory, compile_workers=1, queue_max=4,
        queue_max_per_client=2,
    )  # fmt: skip
    return create_app(settings, engine=engine)


def _client(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=300)


def test_a_flood_of_big_tools_sources_gets_429s_and_another_client_is_served(
    app: FastAPI,
) -> None:
    state: AppState = app.state.maskscope
    pool = state.pools.parses
    share = pool.threads + (pool.queue_per_client or 0)

    async def scenario() -> tuple[Counter[int], httpx.Response]:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        try:
            async with _client(app, "203.0.113.1") as flood, _client(app, "203.0.113.2") as other:
                body = big_source(state.settings)
                asked = [asyncio.ensure_future(flood.post("/api/compile", json=body))
                         for _ in range(FLOOD)]  # fmt: skip
                while pool.pending < share:  # the flood holds its share of the parses
                    assert not all(a.done() for a in asked), [a.result().text for a in asked]
                    await asyncio.sleep(0.01)
                served = await other.post("/api/compile", json={
                    "kind": "tools", "source": json.dumps(ROUTER_TOOLS)})  # fmt: skip
                answers = await asyncio.gather(*asked)
                return Counter(a.status_code for a in answers), served
        finally:
            await lifespan.__aexit__(None, None, None)

    statuses, served = asyncrun.run(scenario())
    assert served.status_code == 200, served.text
    assert "fetch_user_features" in served.json()["grammar"]
    # Those within the client's share were parsed (and refused for their tool_choice).
    assert statuses == {422: share, 429: FLOOD - share}, statuses
