"""The client's configuration, no server needed: URLs and the API key."""

from __future__ import annotations

import pytest

from app.engine.model.remote import VllmClient
from app.exceptions import NotReady
from app.settings import RemoteEngineSpec


def _spec(**overrides: str) -> RemoteEngineSpec:
    fields = {"id": "prod", "url": "https://gpu.example/llm/v1", "model": "m", "tokenizer": "t"}
    return RemoteEngineSpec.model_validate({**fields, **overrides})


def test_vllms_own_routes_live_beside_v1() -> None:
    client = VllmClient(_spec(), timeout_s=5)
    assert client.base_url == "https://gpu.example/llm/v1"
    assert client.root_url == "https://gpu.example/llm"
    client.close()


def test_the_api_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_TEST_KEY", "s3cret")
    client = VllmClient(_spec(api_key_env="MASKSCOPE_TEST_KEY"), timeout_s=5)
    assert client._http.headers["Authorization"] == "Bearer s3cret"
    client.close()


def test_an_api_key_variable_that_is_not_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASKSCOPE_TEST_KEY", raising=False)
    with pytest.raises(NotReady) as caught:
        VllmClient(_spec(api_key_env="MASKSCOPE_TEST_KEY"), timeout_s=5)
    assert caught.value.message == (
        "remote engine 'prod': the environment variable MASKSCOPE_TEST_KEY (its api_key_env) "
        "is not set"
    )
