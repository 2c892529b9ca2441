"""The model: loading, the forward engines, tokenizers, prompts and sampling."""
