"""Tool calling and reasoning: what vLLM and xgrammar (SGLang) build from a request's tools."""
