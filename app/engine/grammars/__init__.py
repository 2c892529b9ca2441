"""Grammars: sources (JSON Schema, tools, EBNF, regex, tags) compiled by xgrammar and llguidance."""
