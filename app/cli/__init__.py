"""The command line, ``python -m app``: one module per command, on the same request models and
engine functions as the web layer; :func:`app.cli.main.main` wires them.

The commands import the engine (torch, transformers, xgrammar) inside their ``run``, so that
``--help`` and a mistyped flag answer at once.
"""
