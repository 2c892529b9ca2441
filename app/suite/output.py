"""A check's report for a terminal (``text``), a CI log (``github``: workflow annotations) and a
test runner's UI (``junit``: one test case per source × stack × engine)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from app.suite.records import Case, Finding, SuiteReport

__all__ = ["github", "junit", "text"]


def _failing(report: SuiteReport, finding: Finding) -> bool:
    return finding.level in report.fail_on and not finding.baselined


def _compiled(case: Case) -> str:
    if not case.compiled:
        return "does not compile"
    size = f", {case.size_bytes:,} bytes" if case.size_bytes is not None else ""
    tests = (
        f", tests {case.tests['passed']} passed {case.tests['failed']} failed" if case.tests else ""
    )
    return f"compiled in {case.compile_ms or 0:.1f} ms{size}{tests}"


def _where(f: Finding) -> str:
    return f"{f.file}:{f.line}:{f.column}"


def text(report: SuiteReport) -> str:
    """One line a case, one a finding (``FILE:LINE:COL``), then the summary."""
    lines = []
    for case in report.cases:
        failed = any(_failing(report, f) for f in case.findings)
        notes = ", cached" if case.cached else ""
        notes += ", examination cut short by load" if case.cut_short else ""
        lines.append(f"{'FAIL' if failed else 'ok  '} {case.id}: {_compiled(case)}{notes}")
        for f in case.findings:
            mark = " (baseline)" if f.baselined else "" if _failing(report, f) else " (not failing)"
            at = f" {f.pointer}" if f.pointer else ""
            lines.append(f"  {_where(f)}: {f.level.value}{at}{mark}: {f.message}")
            if f.witness is not None:
                lines.append(f"      witness: {json.dumps(f.witness, ensure_ascii=False)[:200]}")
    counts = ", ".join(f"{n} {level}" for level, n in report.counts().items() if n)
    lines.append(
        f"{len(report.cases)} cases, {len(report.failing())} failing findings"
        f"{f' ({counts})' if counts else ''}"
    )
    return "\n".join(lines)


def _escape(value: str, *, property_: bool = False) -> str:
    """GitHub's workflow-command escapes (``%``, CR, LF; ``:`` and ``,`` in a property)."""
    out = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return out.replace(":", "%3A").replace(",", "%2C") if property_ else out


def github(report: SuiteReport) -> str:
    """A workflow annotation a finding (``::error`` when it fails the run, else
    ``::warning``), then the summary line."""
    lines = []
    for case in report.cases:
        for f in case.findings:
            command = "error" if _failing(report, f) else "warning"
            title = _escape(f"maskscope {f.level.value} [{case.stack}/{case.engine}]",
                            property_=True)  # fmt: skip
            where = f"file={_escape(f.file, property_=True)},line={f.line},col={f.column}"
            at = f"{f.pointer}: " if f.pointer else ""
            lines.append(f"::{command} {where},title={title}::{_escape(at + f.message)}")
    lines.append(f"maskscope: {len(report.cases)} cases, {len(report.failing())} failing findings")
    return "\n".join(lines)


def junit(report: SuiteReport) -> str:
    """JUnit XML: a ``testcase`` a case (``classname`` its stack and engine), failed by the
    findings at a failing level; the others in its ``system-out``."""
    root = ET.Element("testsuites", name="maskscope check")
    suite = ET.SubElement(root, "testsuite", name="maskscope", tests=str(len(report.cases)))
    failures = 0
    for case in report.cases:
        element = ET.SubElement(
            suite, "testcase", classname=f"maskscope.{case.stack}.{case.engine}",
            name=case.source, file=case.file, time=f"{(case.compile_ms or 0) / 1000:.6f}",
        )  # fmt: skip
        failing = [f for f in case.findings if _failing(report, f)]
        if failing:
            failures += 1
            body = "\n".join(f"{_where(f)}: {f.level.value} {f.pointer or ''}: {f.message}"
                             for f in failing)  # fmt: skip
            levels = sorted({f.level.value for f in failing})
            failure = ET.SubElement(element, "failure", type=",".join(levels),
                                    message=f"{len(failing)} failing finding(s)")  # fmt: skip
            failure.text = body
        others = [f for f in case.findings if not _failing(report, f)]
        out = [_compiled(case)] + [f"{_where(f)}: {f.level.value}: {f.message}" for f in others]
        ET.SubElement(element, "system-out").text = "\n".join(out)
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    root.set("tests", str(len(report.cases)))
    root.set("failures", str(failures))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
