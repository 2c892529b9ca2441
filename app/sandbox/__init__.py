"""Pydantic sources turned into JSON Schema, and outputs validated, without running user code in
the server: a static check (``check``), then a short-lived, limited process (``process``,
``runner``), behind one front door (``sandbox.Sandbox``).

This package's ``__init__`` imports nothing: the sandbox process imports ``app.sandbox.runner``
and must not pull in torch.
"""
