"""The command line, ``python -m app``: one module per command, on the same request models and
engine functions as the web layer; :func:`main` wires them."""

from app.cli.main import main

__all__ = ["main"]
