from __future__ import annotations

import os
import re

import pytest
import torch

from app.engine import Engine, load_model
from app.engine.model.loading import cpu_threads, resolve_device, resolve_dtype
from app.examples import load_examples
from app.exceptions import ModelLoadError
from app.settings import Settings


def test_device_and_dtype_resolution() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) is torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu")) is torch.float16


def test_the_embedded_model_and_its_identity(engine: Engine) -> None:
    model = engine.model
    identity = model.identity
    assert identity.model_id.startswith("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert re.fullmatch(r"[0-9a-f]{64}", identity.weights_sha256 or "")
    assert identity.xgrammar == "0.2.9" and identity.transformers == "5.24.0"
    assert identity.torch == torch.__version__


def test_the_bitmask_is_sized_from_the_model_config(engine: Engine) -> None:
    tokens = engine.model.tokens
    assert tokens.vocab_size == engine.model.model.config.vocab_size == 49152
    assert len(tokens.token_bytes) == tokens.vocab_size
    assert tokens.stop_ids == frozenset({2})
    assert tokens.text(2) == "<|im_end|>" and tokens.output_bytes(2) == b""


def test_a_model_that_cannot_be_found(tmp_path: object) -> None:
    with pytest.raises(ModelLoadError) as caught:
        load_model(Settings(model=str(tmp_path)))
    assert caught.value.message.startswith(f"cannot load model {str(tmp_path)!r}")


@pytest.mark.parametrize(
    ("cores", "environ", "threads"),
    [(2, {}, 1), (16, {}, 8), (1, {}, 1), (None, {}, 1), (8, {"OMP_NUM_THREADS": "8"}, None)],
)
def test_cpu_threads_are_half_the_cores_unless_omp_num_threads_says(
    cores: int | None, environ: dict[str, str], threads: int | None
) -> None:
    assert cpu_threads(cores, environ) == threads


def test_the_shipped_cpu_threads_keep_float32s_probabilities(engine: Engine) -> None:
    shipped = cpu_threads(os.cpu_count(), os.environ)
    assert torch.get_num_threads() == (shipped or torch.get_num_threads())
    model, tokens = engine.model.model, engine.model.tokens
    prompts = [
        tokens.tokenizer.apply_chat_template(
            [{"role": "system", "content": e.system}, {"role": "user", "content": e.prompt}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for e in load_examples()
    ]
    before = torch.get_num_threads()
    probabilities: dict[int, list[torch.Tensor]] = {}
    try:
        for threads in {os.cpu_count() or 1, before}:  # torch's default, and what ships
            torch.set_num_threads(threads)
            with torch.inference_mode():
                probabilities[threads] = [
                    torch.softmax(model(input_ids=torch.tensor([tokens.encode(p)])).logits[0], -1)
                    for p in prompts
                ]
    finally:
        torch.set_num_threads(before)
    reference, shipped_run = probabilities[os.cpu_count() or 1], probabilities[before]
    worst = max(float((a - b).abs().max()) for a, b in zip(reference, shipped_run, strict=True))
    assert worst <= 1e-3
