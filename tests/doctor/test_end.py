"""The Doctor's end-of-generation finding (#51693, #52153): a model whose stop ids leave out its
tokenizer's EOS (real Qwen3.6 tokenizer, real xgrammar) has that EOS refused where the document
is complete; the model's own stop ids give no finding."""

from __future__ import annotations

import json
from pathlib import Path

from app.doctor import Doctor
from app.engine import GrammarKind, GrammarSpec
from app.engine.factories.tokenizer_only import open_tokenizer
from app.settings import Settings, TokenizerSpec

SPEC = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps({"enum": ["yes"]}))
#: Qwen3.6's `<|endoftext|>` (its `<|im_end|>`, the tokenizer's EOS, is 248046)
ENDOFTEXT = 248044


def _findings(tmp: Path, stop_token_ids: list[int] | None) -> list[dict[str, object]]:
    model = TokenizerSpec(id="qwen", tokenizer="qwen3.6", stop_token_ids=stop_token_ids)
    settings = Settings(db_path=tmp / "p.db", compile_workers=1, tokenizers=[model])
    engine = open_tokenizer(settings, "qwen")
    assert engine is not None
    try:
        report = Doctor.of(engine).examine(SPEC, budget_ms=20_000)
        eos = engine.model.tokens.tokenizer.eos_token_id
        assert eos != ENDOFTEXT and engine.model.tokens.text(ENDOFTEXT) == "<|endoftext|>"
    finally:
        engine.close()
    return [f.to_dict() for f in report.findings if "end token" in f.cause]


def test_an_eos_left_out_of_the_stop_ids_is_refused_where_the_document_ends(
    tmp_path: Path,
) -> None:
    found = _findings(tmp_path, [ENDOFTEXT])
    assert len(found) == 1
    assert "#51693" in str(found[0]["cause"]) and "<|im_end|>" in str(found[0]["cause"])
    assert found[0]["example"] == '"yes"'
    assert _findings(tmp_path, None) == []  # the shipped stop ids: the EOS is among them
