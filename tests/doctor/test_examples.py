"""The Doctor on every example, in both forms (JSON Schema and Pydantic source)."""

from __future__ import annotations

import functools
import json

import pytest

from app.doctor import Doctor, PydanticSource, Status, Verdict
from app.doctor.records import Direction, Witness
from app.engine import GrammarKind, GrammarSpec
from app.examples import EXAMPLES_DIR
from app.sandbox.sandbox import Sandbox

EXAMPLES = ["pricing", "router", "candidate", "risk", "nested"]


def json_refuses(text: str) -> bool:
    """Whether Python's JSON parser refuses ``text``."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return True
    return False


def _bounded_string_bug(witness: Witness) -> bool:
    """xgrammar 0.2.9 writes a string with minLength/maxLength as ``"\\"" [^"\\\\\\r\\n]{0,n}
    "\\""``: it takes raw control characters (not JSON) and refuses every escape."""
    if witness.direction is Direction.GRAMMAR_ACCEPTS:
        return all("control character" in e.message for e in witness.errors)
    return witness.refusal is not None and witness.text[witness.refusal.offset] == "\\"


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("form", [".json", ".py"])
def test_every_keyword_of_the_examples_is_enforced(doctor: Doctor, name: str, form: str) -> None:
    source = (EXAMPLES_DIR / f"{name}{form}").read_text()
    pydantic = None
    if form == ".py":
        sandbox = Sandbox()
        derived = sandbox.schema(source)
        pydantic = PydanticSource(
            source, derived.root, functools.partial(sandbox.validate_many, source, None)
        )
        schema_text = json.dumps(derived.schema, indent=2)
    else:
        schema_text = source
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, schema_text)
    report = doctor.examine(spec, pydantic=pydantic)
    flagged = [k for k in report.keywords if k.status in (Status.IGNORED, Status.WEAKENED)]
    # xgrammar 0.2.9's length-bounded strings take raw control characters: those keywords are
    # weakened (a grammar that writes what is not JSON enforces nothing), and nothing else is.
    assert all(k.keyword in ("minLength", "maxLength") for k in flagged), flagged
    assert all(k.witness is not None and json_refuses(k.witness) for k in flagged)
    causes = {f.direction: f for f in report.findings}
    assert not flagged or "control characters" in causes["not_json"].cause, report.findings
    assert {f.direction for f in report.findings} <= {
        "not_json", Direction.SCHEMA_ACCEPTS.value}, report.findings  # fmt: skip
    assert all(k.line is not None for k in report.keywords)
    # The only witnesses are those of one xgrammar 0.2.9 bug in length-bounded strings.
    assert all(_bounded_string_bug(w) for w in report.witnesses), report.witnesses
    rows = {r.backend: r.verdict for r in report.backends}
    assert rows["vllm"] in (Verdict.OK, Verdict.IGNORES) and rows["sglang"] is not Verdict.REFUSES
    assert rows["llguidance"] is Verdict.OK and rows["openai_strict"] is Verdict.REFUSES
