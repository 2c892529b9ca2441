"""Pydantic sources turned into JSON Schema, and outputs validated, without running user code in
the server: a static check (``scan``, ``check``, and ``reach`` for what imported names reach),
then a short-lived, limited process (``process``, ``runner``) that the kernel contains
(``contain``, ``landlock``, ``seccomp``), behind one front door (``sandbox.Sandbox``).

This package's ``__init__`` imports nothing: the sandbox process imports ``app.sandbox.runner``
and must not pull in torch.
"""
