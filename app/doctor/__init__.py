"""The schema Doctor: is a schema enforced as written, and what will each serving stack do?

- ``keywords``: the schema's constraint keywords and where they are;
- ``enforcement``: each keyword ignored, weakened, warned or enforced (the probe that compares
  grammars runs in a compile worker: ``GrammarCompiler.probe_keywords``);
- ``targeted``, ``proving``: documents built to break each keyword alone, judged by the
  validator and replayed through the grammar (``enforced`` is proven, not guessed), and the
  over-restrictions tried the same way;
- ``walk``, ``instances``, ``witnesses``: documents from the grammar alone and from the schema
  alone, and the ones on which the two disagree (the random search, a second net);
- ``findings``: every witness grouped by cause, in words (the report's ``findings``);
- ``safety``: the wall-clock safety stop beside the counts that bound every part (a part it
  stops says ``cut_short_by_load``, never that the schema is too complex);
- ``backends``: one module per serving stack (xgrammar, vLLM, SGLang, llguidance, OpenAI strict);
- ``doctor``: the front door, used by the web layer and the CLI alike.
"""

from app.doctor.doctor import DEFAULT_BUDGET_MS, MAX_BUDGET_MS, Doctor, PydanticSource
from app.doctor.records import (
    BackendRow,
    Costs,
    DoctorReport,
    KeywordFinding,
    Status,
    Verdict,
    Witness,
)

__all__ = [
    "DEFAULT_BUDGET_MS",
    "MAX_BUDGET_MS",
    "BackendRow",
    "Costs",
    "Doctor",
    "DoctorReport",
    "KeywordFinding",
    "PydanticSource",
    "Status",
    "Verdict",
    "Witness",
]
