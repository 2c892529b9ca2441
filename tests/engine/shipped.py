"""The shipped Qwen3.6 tokenizer as an engine, for the tests that need a production tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.engine import Engine
from app.engine.factories.tokenizer_only import TokenizerModel, open_tokenizer
from app.settings import Settings


@contextmanager
def qwen_engine(tmp: Path) -> Iterator[Engine[TokenizerModel]]:
    """The ``qwen3.6`` tokenizer-only engine (one compile worker, its db under ``tmp``)."""
    engine = open_tokenizer(Settings(db_path=tmp / "p.db", compile_workers=1), "qwen3.6")
    assert engine is not None
    try:
        yield engine
    finally:
        engine.close()
