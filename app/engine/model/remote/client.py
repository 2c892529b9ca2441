"""An HTTP client for one vLLM server: raw next-token log-probabilities and constrained choices.

Every request names the prefix as token ids (rendered here with the tokenizer the mask is
computed with) and sends no structured-output parameter: vLLM's logprobs are then the raw
distribution, before any mask. Transport failures and the server's own errors come back as the
typed errors of :mod:`app.exceptions`, never as ``httpx`` exceptions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from app.exceptions import EngineError, EngineTimeout, EngineUnreachable, NotReady
from app.settings import RemoteEngineSpec

__all__ = ["ALL_TOKENS", "Choice", "Logprobs", "VllmClient"]

#: ``logprobs`` value that asks for the whole vocabulary (allowed by ``--max-logprobs -1``).
ALL_TOKENS = -1
_TOKEN_PREFIX = "token_id:"
_CONNECT_TIMEOUT_S = 5.0
# vLLM fills unset sampling fields from the model's generation_config.json (a production model
# often ships top_k, min_p or a repetition penalty there); the choice must use the session's
# settings and nothing else, so every field is sent.
_NEUTRAL_SAMPLING = {
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


@dataclass(frozen=True)
class Logprobs:
    """Raw next-token log-probabilities for one prefix, most probable first (ties by id).

    Attributes:
        token_ids: the ids the server returned (int64).
        logprobs: their raw log-probabilities at temperature 1 (float64; the server clips the
            smallest at -9999).
        complete: whether these are the whole vocabulary (``logprobs: -1``), not a top-K.
        request_ms: wall time of the request.
    """

    token_ids: npt.NDArray[np.int64]
    logprobs: npt.NDArray[np.float64]
    complete: bool
    request_ms: float


@dataclass(frozen=True)
class Choice:
    """The token the server sampled among the allowed ones.

    Attributes:
        token_id: the chosen id.
        logprob: its raw log-probability (before the restriction, at temperature 1).
        request_ms: wall time of the request.
    """

    token_id: int
    logprob: float
    request_ms: float


class VllmClient:
    """Requests to one vLLM server (OpenAI-compatible, plus vLLM's own routes).

    Thread-safe: sessions stepping at once share one connection pool, and vLLM batches their
    requests.

    Args:
        spec: the engine's entry in ``MASKSCOPE_REMOTE_ENGINES``.
        timeout_s: the longest wait for one answer (connecting takes at most 5 s of it).

    Raises:
        NotReady: ``api_key_env`` names an environment variable that is not set.
    """

    def __init__(self, spec: RemoteEngineSpec, *, timeout_s: float) -> None:
        self.spec = spec
        self.base_url = spec.url.rstrip("/")
        # /version, /tokenize and /detokenize live beside /v1, not under it.
        self.root_url = self.base_url.removesuffix("/v1")
        headers = {}
        if spec.api_key_env is not None:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise NotReady(
                    f"remote engine {spec.id!r}: the environment variable {spec.api_key_env} "
                    "(its api_key_env) is not set"
                )
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(_CONNECT_TIMEOUT_S, timeout_s)),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def version(self) -> str:
        """The server's vLLM version (``GET /version``)."""
        return str(self._field(self._get(f"{self.root_url}/version"), "version"))

    def served_models(self) -> list[str]:
        """The model names the server answers to (``GET /v1/models``)."""
        data = self._field(self._get(f"{self.base_url}/models"), "data")
        return [str(entry["id"]) for entry in data]

    def tokenize(self, text: str) -> list[int]:
        """The server's token ids for ``text``, with no special tokens added."""
        body = {"model": self.spec.model, "prompt": text, "add_special_tokens": False}
        return [int(i) for i in self._field(self._post("/tokenize", body), "tokens")]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """The server's text for ``token_ids``."""
        body = {"model": self.spec.model, "tokens": list(token_ids)}
        return str(self._field(self._post("/detokenize", body), "prompt"))

    def next_logprobs(self, prompt_ids: Sequence[int], *, count: int) -> Logprobs:
        """The raw distribution of the token after ``prompt_ids``.

        Args:
            prompt_ids: the prefix (prompt and generated tokens) as token ids.
            count: how many of the most probable tokens to return (``ALL_TOKENS``: all). The
                server refuses more than its ``--max-logprobs`` (an ``EngineError``).
        """
        body = self._completion(prompt_ids, logprobs=count, temperature=0.0)
        start = time.perf_counter()
        data = self._post("/v1/completions", body)
        elapsed = (time.perf_counter() - start) * 1000
        table = self._field(self._field(self._choice(data), "logprobs"), "top_logprobs")
        ids, values = self._parse_top(table[0] if table else None)
        return Logprobs(ids, values, complete=count == ALL_TOKENS, request_ms=elapsed)

    def choose(
        self,
        prompt_ids: Sequence[int],
        *,
        allowed_ids: Sequence[int],
        temperature: float,
        top_p: float,
        seed: int,
    ) -> Choice:
        """Let the server sample the next token among ``allowed_ids`` only.

        The server applies temperature and top-p to the allowed tokens' logits and draws with
        ``seed``: the same prefix, allowed set and seed give the same token (up to the last bits
        of a batch that differs under concurrent load).
        """
        if not allowed_ids:
            raise EngineError("no token is allowed: there is nothing to choose from")
        body = self._completion(prompt_ids, logprobs=0, temperature=temperature)
        body.update(top_p=top_p, seed=seed, allowed_token_ids=list(allowed_ids))
        start = time.perf_counter()
        data = self._post("/v1/completions", body)
        elapsed = (time.perf_counter() - start) * 1000
        choice = self._choice(data)
        token_ids = self._field(choice, "token_ids")
        logprobs = self._field(self._field(choice, "logprobs"), "token_logprobs")
        if not token_ids or not logprobs:
            raise self._unexpected("no token in the answer")
        token_id = int(token_ids[0])
        if token_id not in set(allowed_ids):
            raise self._unexpected(f"token {token_id} is not among allowed_token_ids")
        return Choice(token_id=token_id, logprob=float(logprobs[0]), request_ms=elapsed)

    def _completion(
        self, prompt_ids: Sequence[int], *, logprobs: int, temperature: float
    ) -> dict[str, Any]:
        return {
            "model": self.spec.model,
            "prompt": list(prompt_ids),
            "max_tokens": 1,
            "logprobs": logprobs,
            "temperature": temperature,
            "top_p": 1.0,
            **_NEUTRAL_SAMPLING,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }

    def _parse_top(
        self, table: dict[str, float] | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        if not isinstance(table, dict) or not table:
            raise self._unexpected("no top_logprobs in the answer")
        try:
            ids = np.fromiter(
                (int(key.removeprefix(_TOKEN_PREFIX)) for key in table), np.int64, len(table)
            )
            values = np.fromiter((float(v) for v in table.values()), np.float64, len(table))
        except (TypeError, ValueError) as error:
            raise self._unexpected(
                "top_logprobs are not keyed 'token_id:N' (does the server support "
                "return_tokens_as_token_ids?)"
            ) from error
        order = np.lexsort((ids, -values))
        return ids[order], values[order]

    def _get(self, url: str) -> Any:
        return self._send("GET", url, None)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("POST", f"{self.root_url}{path}", body)

    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        where = f"remote engine {self.spec.id!r} ({method} {url})"
        try:
            response = self._http.request(method, url, json=body)
        except httpx.ConnectTimeout as error:
            raise EngineUnreachable(f"{where}: no connection within the time limit") from error
        except httpx.TimeoutException as error:
            timeout = self._http.timeout.read
            raise EngineTimeout(f"{where}: no answer within {timeout:g} s") from error
        except httpx.TransportError as error:
            reason = str(error) or type(error).__name__
            raise EngineUnreachable(f"{where} is unreachable: {reason}") from error
        if response.is_error:
            raise EngineError(
                f"{where} answered {response.status_code}: {_server_message(response)}"
            )
        try:
            return response.json()
        except ValueError as error:
            raise EngineError(f"{where} answered with something that is not JSON") from error

    def _choice(self, data: Any) -> dict[str, Any]:
        choices = self._field(data, "choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._unexpected("no choices in the answer")
        return choices[0]

    def _field(self, data: Any, name: str) -> Any:
        if not isinstance(data, dict) or name not in data:
            raise self._unexpected(f"the answer has no {name!r}")
        return data[name]

    def _unexpected(self, what: str) -> EngineError:
        return EngineError(f"remote engine {self.spec.id!r} gave an unexpected answer: {what}")


def _server_message(response: httpx.Response) -> str:
    """vLLM's ``{"error": {"message"}}``, FastAPI's ``{"detail"}``, or the start of the text."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:500].strip() or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        for key in ("message", "detail"):
            if key in data:
                return str(data[key])
    return str(data)[:500]
