"""Maskscope: see what xgrammar's token mask allows, blocks and why, one token at a time."""

__version__ = "0.1.0"
