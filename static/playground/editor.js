// The schema editor (CodeMirror), its kind tabs, and the marks of the compile error and the Doctor.
(() => {
  "use strict";
  const { $, $$, ui } = MS;
  const SAMPLES = {
    pydantic: 'from typing import Literal\n\nfrom pydantic import BaseModel, Field\n\n\nclass Answer(BaseModel):\n    verdict: Literal["yes", "no"]\n    reason: str = Field(..., max_length=80)\n',
    ebnf: 'root ::= answer " because " reason\nanswer ::= "yes" | "no"\nreason ::= [a-z ]{1,40} "."\n',
    regex: "[A-Z]{4}[0-9]{2}",
    tools: '{\n  "builder": "xgrammar",\n  "format": "qwen_3",\n  "tools": [\n    {\n      "type": "function",\n      "function": {\n        "name": "get_weather",\n        "parameters": {\n          "type": "object",\n          "properties": {"city": {"type": "string"}},\n          "required": ["city"]\n        }\n      }\n    }\n  ],\n  "tool_choice": "auto",\n  "reasoning": "disabled",\n  "parallel_tool_calls": true\n}\n',
    structural_tag: '{\n  "type": "structural_tag",\n  "format": {\n    "type": "tag",\n    "begin": "<answer>",\n    "content": {"type": "json_schema", "json_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},\n    "end": "</answer>"\n  }\n}\n',
  };
  const lang = new CM.Compartment();
  // The starter a tab inserts into an empty editor is a placeholder: while it is untouched, a
  // paste replaces it instead of joining it (one model, not "models: Answer, <yours>").
  const isStarter = (text) => Object.values(SAMPLES).includes(text);
  const replaceStarter = CM.EditorView.domEventHandlers({
    paste(event, view) {
      const text = event.clipboardData && event.clipboardData.getData("text/plain");
      if (!text || !isStarter(view.state.doc.toString())) return false;
      event.preventDefault();
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text }, selection: { anchor: text.length } });
      return true;
    },
  });

  function languageFor(kind) {
    if (["json_schema", "structural_tag", "tools"].includes(kind)) return CM.json();
    if (kind === "pydantic") return CM.python();
    if (kind === "ebnf") return CM.StreamLanguage.define(CM.ebnf);
    return [];
  }

  function setupEditor(onChange) {
    const textarea = $("#source");
    ui.kind = ($('input[name="kind"]:checked') || { value: "json_schema" }).value;
    document.body.classList.toggle("kind-pydantic", ui.kind === "pydantic");
    ui.editor = new CM.EditorView({
      parent: $("#editor"),
      state: CM.EditorState.create({
        doc: textarea.value,
        extensions: [
          CM.basicSetup, CM.lintGutter(), CM.EditorView.lineWrapping, lang.of(languageFor(ui.kind)), replaceStarter,
          CM.EditorView.cspNonce.of(MS.meta("csp-nonce")),  // its <style> elements, under the CSP
          CM.EditorView.updateListener.of((update) => {
            if (!update.docChanged) return;
            textarea.value = update.state.doc.toString();
            onChange();
          }),
        ],
      }),
    });
  }

  function source() { return ui.editor ? ui.editor.state.doc.toString() : $("#source").value; }

  function setSource(text) {
    const doc = ui.editor.state.doc;
    ui.editor.dispatch({ changes: { from: 0, to: doc.length, insert: text } });
    $("#source").value = text;
  }

  function setKind(kind) {
    ui.sources[ui.kind] = source();
    ui.kind = kind;
    $$('input[name="kind"]').forEach((r) => { r.checked = r.value === kind; });
    document.body.classList.toggle("kind-pydantic", kind === "pydantic");
    ui.editor.dispatch({ effects: lang.reconfigure(languageFor(kind)) });
    setSource(ui.sources[kind] ?? SAMPLES[kind] ?? "");
  }

  // A mark is kept as its line and column and placed on the document as it is when shown: a
  // position computed on an older document may lie past the end of this one.
  function diagnostic(line, column, severity, message, sourceName) {
    return { line, column, severity, message, source: sourceName };
  }

  function placed(mark, doc) {
    let from = 0, to = 0;
    if (mark.line >= 1 && mark.line <= doc.lines) {
      const info = doc.line(mark.line);
      from = mark.column ? Math.min(info.from + Math.max(mark.column - 1, 0), info.to) : info.from;
      to = mark.column ? Math.min(from + 1, doc.length) : info.to;
    } else if (mark.line >= 1) {
      return null;  // a line this document no longer has
    }
    return { from, to: Math.max(to, from), severity: mark.severity, message: mark.message, source: mark.source };
  }

  function applyDiagnostics() {
    const doc = ui.editor.state.doc;
    const all = [...ui.compileDiagnostics, ...ui.doctorDiagnostics, ...(ui.replayDiagnostics || [])]
      .map((m) => placed(m, doc)).filter(Boolean);
    ui.editor.dispatch(CM.setDiagnostics(ui.editor.state, all));
  }

  function markCompileError() {
    const result = $("#compile-result");
    if (!result || !ui.editor) return;
    // a compile sent before the editor was emptied: the hint, not its "invalid JSON"
    if (result.dataset.errorMessage !== undefined && !source().trim()) { showEmptyHint(); return; }
    ui.compileDiagnostics = [];
    if (result.dataset.errorMessage !== undefined) {
      const line = parseInt(result.dataset.errorLine || "", 10);
      const column = parseInt(result.dataset.errorColumn || "1", 10);
      ui.compileDiagnostics.push(diagnostic(line, column, "error", result.dataset.errorMessage));
    }
    if (ui.compileDiagnostics.length) clearDoctor();
    else if ($("#compile-result .stats")) htmx.trigger(document.body, "doctor");
    applyDiagnostics();
    summarizeCompile(result);
  }

  // The compile's verdict in the editor's head, also while the wide panel shows another tab or
  // is folded: a click on it shows the Compile tab.
  function summarizeCompile(result) {
    const summary = $("#compile-summary");
    if (!summary) return;
    const warnings = $$(".warnings li", result).length;
    if (result.dataset.errorMessage !== undefined) {
      const line = result.dataset.errorLine ? ` (line ${result.dataset.errorLine})` : "";
      summary.innerHTML = `<span class="badge bad">does not compile</span>`;
      summary.append(line);
    } else if ($(".stats", result)) {
      summary.innerHTML = `<span class="badge ok">compiled</span>`;
      if (warnings) summary.append(` · ${warnings} warning${warnings > 1 ? "s" : ""}`);
    } else {
      summary.textContent = "";
    }
  }

  // An empty editor is not an error: it says how to start instead of "invalid JSON".
  function showEmptyHint() {
    const result = $("#compile-result");
    if (!result) return;
    result.outerHTML = '<div id="compile-result" class="compile empty-source"><p class="muted">The editor is empty: pick an example above, or write or paste a schema; it compiles as you type.</p></div>';
    ui.compileDiagnostics = [];
    clearDoctor();
    applyDiagnostics();
    summarizeCompile($("#compile-result"));
  }

  // The Doctor runs after each successful compile (never on the typing path); a newer compile's
  // request replaces an older one (hx-sync). Its marks join the compile error's in the lint.
  function markDoctor() {
    const result = $("#doctor-result");
    if (!result || !ui.editor) return;
    const doc = ui.editor.state.doc;
    const marks = JSON.parse(result.dataset.marks || "[]");
    ui.doctorDiagnostics = marks.filter((m) => m.line >= 1 && m.line <= doc.lines)
      .map((m) => diagnostic(m.line, 0, m.severity, m.message, "Doctor"));
    const flagged = Number(result.dataset.flagged || 0);
    $("#doctor-flag").textContent = flagged ? String(flagged) : "";
    applyDiagnostics();
  }

  function clearDoctor() {
    ui.doctorDiagnostics = [];
    $("#doctor-flag").textContent = "";
  }

  const DOCTOR_WAITING = '<div id="doctor-result" class="doctor"><p class="muted">The setup changed: the Doctor examines it once it compiles.</p></div>';

  // The marks and badges of the previous setup: its Doctor findings (tab, badge, editor marks)
  // and its replay's mark go as soon as the setup changes, not when the next answer comes.
  function clearSetupMarks() {
    clearDoctor();
    ui.replayDiagnostics = [];
    const doctor = $("#doctor-result");
    if (doctor && doctor.dataset.marks !== undefined) doctor.outerHTML = DOCTOR_WAITING;
    if (ui.editor) applyDiagnostics();
  }

  // A replay's cause, when it names a schema line: marked in the editor and scrolled to.
  function markReplayLine(line, message) {
    ui.replayDiagnostics = line ? [diagnostic(line, 0, "warning", message, "Replay")] : [];
    applyDiagnostics();
    if (line && line <= ui.editor.state.doc.lines) {
      const pos = ui.editor.state.doc.line(line).from;
      ui.editor.dispatch({ effects: CM.EditorView.scrollIntoView(pos, { y: "center" }) });
    }
  }

  function setCompileView(view) {
    $$(".compile-panel .tab-button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
    $(".compile-view").hidden = view !== "compile";
    $(".doctor-view").hidden = view !== "doctor";
    $(".tests-view").hidden = view !== "tests";
    if (MS.openDock) MS.openDock();
  }

  Object.assign(MS, { setupEditor, source, setSource, setKind, markCompileError, markDoctor,
                      markReplayLine, setCompileView, clearSetupMarks, showEmptyHint });
})();
