"""The xgrammar snippet of a structural tag compiles the grammar Maskscope shows."""

from __future__ import annotations

import json

from app.engine import Engine, GrammarKind
from app.export import export
from tests.export.conftest import make_request, run_until, spec_of

TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "<call>",
        "content": {"type": "json_schema", "json_schema": {"type": "object"}},
        "end": "</call>",
    },
}


def test_the_xgrammar_snippet_compiles_the_tag_maskscope_shows(engine: Engine) -> None:
    req = make_request(engine, kind=GrammarKind.STRUCTURAL_TAG, source=json.dumps(TAG))
    snippet = export(req, "xgrammar")
    assert snippet.not_expressible == ()
    compiled = run_until(snippet.code, "compiled")
    assert str(compiled.grammar) == engine.compile(spec_of(req)).grammar_text
