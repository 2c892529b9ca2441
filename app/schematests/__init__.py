"""Schema unit tests: documents that must pass or fail, judged by the grammar and the schema.

- ``records``: a test, the grammar's verdict, a test's result;
- ``runner``: runs a batch of tests on one compiled grammar (JSON documents are judged in the
  form the grammar writes them, :func:`app.doctor.serialize.normalize`);
- ``jsonl``: the tests file of the command line, one test object a line.

Used by the web layer (``POST /api/tests``, permalinks) and the CLI (``python -m app test``).
"""

from app.schematests.jsonl import read_tests
from app.schematests.records import (
    MAX_TESTS,
    MAX_TEXT_BYTES,
    Expect,
    GrammarVerdict,
    SchemaTest,
    SchemaTestResult,
)
from app.schematests.runner import run_tests

__all__ = [
    "MAX_TESTS",
    "MAX_TEXT_BYTES",
    "Expect",
    "GrammarVerdict",
    "SchemaTest",
    "SchemaTestResult",
    "read_tests",
    "run_tests",
]
