"""Remote engines: vLLM servers that compute the forward pass while Maskscope masks here."""

from __future__ import annotations

from app.engine.model.remote.check import ServerFacts, check_server
from app.engine.model.remote.client import ALL_TOKENS, Choice, Logprobs, VllmClient

__all__ = ["ALL_TOKENS", "Choice", "Logprobs", "ServerFacts", "VllmClient", "check_server"]
