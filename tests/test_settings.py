"""Settings read from the environment: the remote engines' JSON list."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from app.settings import RemoteEngineSpec, Settings

ENTRY = {"id": "prod", "url": "http://10.0.0.5:8000/v1", "model": "llama", "tokenizer": "meta/x"}


def test_remote_engines_are_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    other = {**ENTRY, "id": "b", "url": "https://h/p/v1", "api_key_env": "KEY", "top_logprobs": 20}
    monkeypatch.setenv("MASKSCOPE_REMOTE_ENGINES", json.dumps([ENTRY, other]))
    engines = Settings().remote_engines
    assert engines == [RemoteEngineSpec.model_validate(e) for e in (ENTRY, other)]
    assert engines[1].top_logprobs == 20 and engines[0].top_logprobs is None
    assert Settings(remote_engines=[]).remote_engines == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"url": "http://h:8000"}, "url must be the server's OpenAI base URL"),
        ({"url": "http://h:8000/v1/"}, "url must be the server's OpenAI base URL"),
        ({"url": "ftp://h/v1"}, "url must be the server's OpenAI base URL"),
        ({"id": "local"}, "'local' is the local model's id"),
        ({"id": "a b"}, "String should match pattern"),
        ({"model": ""}, "at least 1 character"),
        ({"api_key_env": "not-a-name"}, "String should match pattern"),
        ({"top_logprobs": 0}, "greater than or equal to 1"),
        ({"extra": 1}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_entry_names_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"remote_engines": [{**ENTRY, **change}]})
    assert message in str(caught.value)


def test_engine_ids_are_unique() -> None:
    with pytest.raises(ValidationError, match="remote engine ids must be unique; repeated: prod"):
        Settings.model_validate({"remote_engines": [ENTRY, ENTRY]})
