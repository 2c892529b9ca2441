"""Check a whole suite of sources (schemas, Pydantic models, tools, grammars) in CI.

- ``kinds``, ``discovery``: a directory, glob or JSONL of sources, each file's kind by its
  longest suffix (``.request.json`` a pasted request), its unit tests beside it;
- ``config``: ``maskscope.toml`` or ``[tool.maskscope]`` of ``pyproject.toml``;
- ``checker``: each source × stack × engine: the Doctor's examination (``verdicts`` reads it as
  findings), the compile, the unit tests (``unit_tests``), through the ``cache``;
- ``stacked``: a source as a vLLM release takes it, asked through that stack's runner (its
  tools builder, its structured-output backend's refusal and options, a request's derivation);
- ``positions``: a pointer's line and column in the file;
- ``baseline``, ``shard``: accepted findings; CI-matrix shards and their merge;
- ``output``, ``sarif``: the text, GitHub, JUnit and SARIF 2.1.0 forms (JSON: ``records``).

Used by the CLI (``python -m app check``).
"""

from app.suite.records import Case, CheckOptions, Finding, Level, SuiteReport

__all__ = ["Case", "CheckOptions", "Finding", "Level", "SuiteReport"]
