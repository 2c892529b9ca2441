"""Engines built from settings: tokenizer-only models and remote servers."""
