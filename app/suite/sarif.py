"""A check's report as SARIF 2.1.0 (OASIS): a rule a finding level, a result a finding at its
line and column, so GitHub code scanning marks the keyword's line."""

from __future__ import annotations

import importlib.metadata
from typing import Any
from urllib.parse import quote

from app.suite.records import Level, SuiteReport

__all__ = ["SARIF_SCHEMA", "sarif"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_RULES = {
    Level.COMPILE_ERROR: "the source does not parse, derive or compile",
    Level.IGNORED: "a keyword the grammar ignores: it is the same grammar without it",
    Level.WEAKENED: "a keyword the grammar weakens: a document it accepts breaks the keyword",
    Level.OVER_RESTRICTED: "the grammar refuses documents the schema accepts",
    Level.UNCONSTRAINED: "a tool call, or part of one, left unconstrained",
    Level.TEST_FAILED: "a schema unit test failed",
    Level.SLOW_COMPILE: "the compile took at least the threshold",
}


def _version() -> str:
    try:
        return importlib.metadata.version("maskscope")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _rules() -> list[dict[str, Any]]:
    return [
        {
            "id": level.value,
            "name": "".join(part.title() for part in level.value.split("_")),
            "shortDescription": {"text": description},
            "helpUri": "https://github.com/maskscope/maskscope/blob/main/docs/ci.md",
        }
        for level, description in _RULES.items()
    ]


def sarif(report: SuiteReport, *, baseline: bool = False) -> dict[str, Any]:
    """The SARIF log: one run, a result a finding (``error`` when it fails the run, else
    ``warning``), each with its stable key as a partial fingerprint; with ``baseline``, each
    result's ``baselineState`` says whether the baseline knew it."""
    index = {level: i for i, level in enumerate(_RULES)}
    results = []
    for case in report.cases:
        for f in case.findings:
            failing = f.level in report.fail_on and not f.baselined
            result: dict[str, Any] = {
                "ruleId": f.level.value,
                "ruleIndex": index[f.level],
                "level": "error" if failing else "warning",
                "message": {"text": f"[{case.stack}/{case.engine}] {f.message}"},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": quote(f.file)},
                    "region": {"startLine": f.line, "startColumn": f.column},
                }}],
                "partialFingerprints": {"maskscope/v1": f.key(case)},
                "properties": {"stack": case.stack, "engine": case.engine,
                               "pointer": f.pointer, "witness": f.witness},
            }  # fmt: skip
            if f.pointer:
                result["locations"][0]["logicalLocations"] = [
                    {"fullyQualifiedName": f.pointer, "kind": "member"}
                ]
            if baseline:
                result["baselineState"] = "unchanged" if f.baselined else "new"
            results.append(result)
    driver = {"name": "maskscope", "version": _version(), "rules": _rules(),
              "informationUri": "https://github.com/maskscope/maskscope"}  # fmt: skip
    run = {"tool": {"driver": driver}, "columnKind": "unicodeCodePoints", "results": results}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
