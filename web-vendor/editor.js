// The parts of CodeMirror 6 the playground uses, bundled once into static/vendor/codemirror.js.
export { EditorView, basicSetup } from "codemirror";
export { EditorState, Compartment } from "@codemirror/state";
export { json } from "@codemirror/lang-json";
export { python } from "@codemirror/lang-python";
export { StreamLanguage } from "@codemirror/language";
export { ebnf } from "@codemirror/legacy-modes/mode/ebnf";
export { setDiagnostics, lintGutter } from "@codemirror/lint";
