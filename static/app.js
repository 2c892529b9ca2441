// Maskscope playground: the editor, the controls, and the pictures (bitmask, timeline).
// Everything else is server-rendered HTML that htmx swaps in.
(() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const SAMPLES = {
    pydantic: 'from typing import Literal\n\nfrom pydantic import BaseModel, Field\n\n\nclass Answer(BaseModel):\n    verdict: Literal["yes", "no"]\n    reason: str = Field(..., max_length=80)\n',
    ebnf: 'root ::= answer " because " reason\nanswer ::= "yes" | "no"\nreason ::= [a-z ]{1,40} "."\n',
    regex: "[A-Z]{4}[0-9]{2}",
  };
  const ui = {
    sessionId: null, dirty: true, running: false, selected: null, follow: true,
    editor: null, kind: "json_schema", sources: {}, vocab: null, vocabLoading: null,
    inspectorBusy: false, inspectorWanted: null, compileDiagnostics: [], doctorDiagnostics: [],
  };
  const lang = new CM.Compartment();

  // ---------- editor ----------
  function languageFor(kind) {
    if (kind === "json_schema") return CM.json();
    if (kind === "pydantic") return CM.python();
    if (kind === "ebnf") return CM.StreamLanguage.define(CM.ebnf);
    return [];
  }

  function setupEditor() {
    const textarea = $("#source");
    ui.kind = ($('input[name="kind"]:checked') || { value: "json_schema" }).value;
    document.body.classList.toggle("kind-pydantic", ui.kind === "pydantic");
    ui.editor = new CM.EditorView({
      parent: $("#editor"),
      state: CM.EditorState.create({
        doc: textarea.value,
        extensions: [
          CM.basicSetup, CM.lintGutter(), lang.of(languageFor(ui.kind)),
          CM.EditorView.updateListener.of((update) => {
            if (!update.docChanged) return;
            textarea.value = update.state.doc.toString();
            configChanged(true);
          }),
        ],
      }),
    });
  }

  function setSource(text) {
    const doc = ui.editor.state.doc;
    ui.editor.dispatch({ changes: { from: 0, to: doc.length, insert: text } });
    $("#source").value = text;
  }

  function setKind(kind) {
    ui.sources[ui.kind] = ui.editor.state.doc.toString();
    ui.kind = kind;
    $$('input[name="kind"]').forEach((r) => { r.checked = r.value === kind; });
    document.body.classList.toggle("kind-pydantic", kind === "pydantic");
    ui.editor.dispatch({ effects: lang.reconfigure(languageFor(kind)) });
    setSource(ui.sources[kind] ?? SAMPLES[kind] ?? "");
  }

  function markCompileError() {
    const result = $("#compile-result");
    if (!result || !ui.editor) return;
    const line = parseInt(result.dataset.errorLine || "", 10);
    const diagnostics = [];
    if (result.dataset.errorMessage !== undefined) {
      const doc = ui.editor.state.doc;
      let from = 0;
      if (line >= 1 && line <= doc.lines) {
        const info = doc.line(line);
        const column = parseInt(result.dataset.errorColumn || "1", 10);
        from = Math.min(info.from + Math.max(column - 1, 0), info.to);
      }
      const to = Math.min(from + 1, doc.length);
      diagnostics.push({ from, to: Math.max(to, from), severity: "error",
                         message: result.dataset.errorMessage });
    }
    ui.compileDiagnostics = diagnostics;
    if (diagnostics.length) clearDoctor();
    else if ($("#compile-result .stats")) htmx.trigger(document.body, "doctor");
    applyDiagnostics();
  }

  // ---------- the Doctor ----------
  // It runs after each successful compile (never on the typing path); a newer compile's request
  // replaces an older one (hx-sync). Its marks join the compile error's in the editor's lint.
  function applyDiagnostics() {
    const all = [...(ui.compileDiagnostics || []), ...(ui.doctorDiagnostics || [])];
    ui.editor.dispatch(CM.setDiagnostics(ui.editor.state, all));
  }

  function markDoctor() {
    const result = $("#doctor-result");
    if (!result || !ui.editor) return;
    const doc = ui.editor.state.doc;
    const marks = JSON.parse(result.dataset.marks || "[]");
    ui.doctorDiagnostics = marks.filter((m) => m.line >= 1 && m.line <= doc.lines).map((m) => {
      const line = doc.line(m.line);
      return { from: line.from, to: line.to, severity: m.severity, message: m.message, source: "Doctor" };
    });
    const flagged = Number(result.dataset.flagged || 0);
    $("#doctor-flag").textContent = flagged ? String(flagged) : "";
    applyDiagnostics();
  }

  function clearDoctor() {
    ui.doctorDiagnostics = [];
    $("#doctor-flag").textContent = "";
  }

  function setCompileView(view) {
    $$(".compile-panel .tab-button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
    $(".compile-view").hidden = view !== "compile";
    $(".doctor-view").hidden = view !== "doctor";
  }

  // ---------- config ----------
  function configChanged(recompile) {
    ui.dirty = true;
    if (recompile) htmx.trigger(document.body, "compile");
  }

  function applyPreset(name) {
    const presets = JSON.parse($("#presets").textContent);
    const opts = presets[name];
    if (!opts) return;
    const form = $("#config");
    form.any_whitespace.checked = opts.any_whitespace;
    form.strict_mode.checked = opts.strict_mode;
    form.indent.value = opts.indent ?? "";
    form.sep_item.value = opts.separators ? opts.separators[0] : "";
    form.sep_key.value = opts.separators ? opts.separators[1] : "";
    form.max_whitespace_cnt.value = opts.max_whitespace_cnt ?? "";
  }

  async function loadExample(id) {
    if (!id) return;
    const response = await fetch(`/api/examples/${encodeURIComponent(id)}`);
    if (!response.ok) return;
    const example = await response.json();
    const form = $("#config");
    Object.assign(ui.sources, example.sources);
    const kind = ui.kind === "pydantic" ? "pydantic" : "json_schema";
    if (ui.kind !== kind) setKind(kind); else setSource(example.sources[kind]);
    form.system.value = example.system;
    form.user.value = example.prompt;
    form.max_tokens.value = example.max_tokens;
    form.schema_in_prompt.checked = example.schema_in_prompt;
    setPromptMode("chat");
    history.replaceState(null, "", `/?example=${encodeURIComponent(id)}`);
    configChanged(true);
  }

  function setPromptMode(mode) {
    $$('input[name="prompt_mode"]').forEach((r) => { r.checked = r.value === mode; });
    $(".chat-fields").hidden = mode !== "chat";
    $(".raw-fields").hidden = mode !== "raw";
  }

  // ---------- session controls ----------
  // Actions queue up, so that quick key presses neither race nor open two sessions.
  let chain = Promise.resolve();
  let pending = 0;
  function enqueue(action) {
    if (pending >= 4) return chain;
    pending++;
    chain = chain.then(action).catch((error) => console.error(error)).finally(() => { pending--; });
    return chain;
  }

  function adoptSession() {
    const session = $("#session");
    if (!session) return null;
    ui.sessionId = session.dataset.sessionId;
    ui.dirty = false;
    ui.selected = null;
    ui.follow = true;
    const link = $("#download-trace");
    link.href = `/api/sessions/${ui.sessionId}/trace`;
    link.classList.remove("disabled");
    $("#share-result").innerHTML = "";
    return ui.sessionId;
  }

  async function ensureSession() {
    if (ui.sessionId && !ui.dirty) return ui.sessionId;
    await htmx.ajax("POST", "/ui/sessions", { source: "#config", target: "#session-area", swap: "innerHTML" });
    resetInspector();
    return adoptSession();
  }

  async function openPermalink(id) {
    await htmx.ajax("POST", `/ui/permalinks/${encodeURIComponent(id)}/open`, { target: "#session-area", swap: "innerHTML" });
    adoptSession();
    refresh();
  }

  async function share() {
    if (!ui.sessionId || ui.dirty) {
      $("#toast").innerHTML = '<div class="toast-body">Step or run first: a permalink holds a session.</div>';
      return;
    }
    await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/share`, { target: "#share-result", swap: "innerHTML" });
    const link = $("#share-result .share-link");
    if (!link) return;
    const input = link.querySelector("input");
    input.select();
    try { await navigator.clipboard.writeText(link.dataset.url); link.classList.add("copied"); }
    catch (error) { document.execCommand && document.execCommand("copy"); }
  }

  async function step() {
    if (ui.running) return;
    const id = await ensureSession();
    if (!id || sessionDone()) return;
    await htmx.ajax("POST", `/ui/sessions/${id}/step`, { target: "#tokens", swap: "beforeend" });
  }

  async function back() {
    if (ui.running || !ui.sessionId || ui.dirty) return;
    await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/back`, { target: "#tokens", swap: "beforeend" });
  }

  async function runOrPause() {
    if (ui.running) {
      await fetch(`/ui/sessions/${ui.sessionId}/pause`, { method: "POST" });
      return;
    }
    const id = await ensureSession();
    if (!id || sessionDone()) return;
    ui.follow = true;
    setRunning(true);
    await htmx.ajax("POST", `/ui/sessions/${id}/run`, { target: "#runner", swap: "outerHTML" });
  }

  function reset() {
    ui.sessionId = null;
    ui.dirty = true;
    setRunning(false);
    $("#session-area").innerHTML = '<p class="muted empty">Press <kbd>space</kbd> to run, or <kbd>→</kbd> to take one step.</p>';
    $("#prompt-rendered").innerHTML = "";
    resetInspector();
    drawTimeline();
  }

  function sessionDone() {
    const status = $("#status");
    return status && status.dataset.done === "true";
  }

  function setRunning(running) {
    ui.running = running;
    const button = $("#btn-run");
    button.textContent = running ? "❚❚ Pause" : "▶ Run";
    button.title = running ? "pause after the step in flight (space)" : "run until done, streaming (space)";
    $("#btn-step").disabled = running;
    $("#btn-back").disabled = running;
    document.body.classList.toggle("running", running);
  }

  function resetInspector() {
    const inspector = $("#inspector");
    if (inspector) inspector.outerHTML = '<section id="inspector" class="inspector panel"><p class="muted empty">Select a step (click a token or the timeline) to see its mask.</p></section>';
  }

  // ---------- selection and the inspector ----------
  function select(index) {
    if (!ui.sessionId) return;
    const chips = $$("#tokens .chip");
    ui.follow = index === chips.length - 1;
    ui.selected = index;
    inspect(index);
  }

  function inspect(index) {
    ui.inspectorWanted = index;
    if (ui.inspectorBusy) return;
    ui.inspectorBusy = true;
    htmx.ajax("GET", `/ui/sessions/${ui.sessionId}/steps/${index}`, { target: "#inspector", swap: "outerHTML" })
      .finally(() => {
        ui.inspectorBusy = false;
        if (ui.inspectorWanted !== null && ui.inspectorWanted !== index) inspect(ui.inspectorWanted);
        else ui.inspectorWanted = null;
      });
  }

  function markSelected() {
    const inspector = $("#inspector");
    const index = inspector && inspector.dataset.index !== undefined ? Number(inspector.dataset.index) : null;
    if (index !== null && !$("#replay-result .chip.selected")) ui.selected = index;
    $$("#tokens .chip.selected").forEach((c) => c.classList.remove("selected"));
    const chip = ui.selected !== null ? $(`#tok-${ui.selected}`) : null;
    if (chip) chip.classList.add("selected");
  }

  function loadVocab() {
    if (!ui.vocabLoading) {
      ui.vocabLoading = fetch("/api/vocab").then((r) => r.json()).then((v) => { ui.vocab = v.tokens; return ui.vocab; });
    }
    return ui.vocabLoading;
  }

  function decodeBitmask(b64) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const view = new DataView(bytes.buffer);
    const words = new Uint32Array(bytes.length / 4);
    for (let i = 0; i < words.length; i++) words[i] = view.getUint32(i * 4, true);
    return words;
  }

  const isAllowed = (words, id) => ((words[id >>> 5] >>> (id & 31)) & 1) === 1;
  const visible = (text) => (text === "" ? "∅" : text.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "⇥"));

  function drawMask() {
    const inspector = $("#inspector");
    const canvas = $("#mask-canvas");
    if (!inspector || !canvas || !inspector.dataset.bitmask) return;
    const words = decodeBitmask(inspector.dataset.bitmask);
    const vocabSize = Number(inspector.dataset.vocabSize);
    const cols = 256;
    const rows = Math.ceil(vocabSize / cols);
    canvas.width = cols;
    canvas.height = rows;
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(cols, rows);
    const allowed = [20, 184, 166], blocked = [226, 232, 240], padding = [248, 250, 252];
    for (let id = 0; id < cols * rows; id++) {
      const rgb = id >= vocabSize ? padding : isAllowed(words, id) ? allowed : blocked;
      image.data.set([...rgb, 255], id * 4);
    }
    const mark = (id, rgb) => { if (id >= 0 && id < vocabSize) image.data.set([...rgb, 255], id * 4); };
    (inspector.dataset.top || "").split(",").filter(Boolean).map(Number)
      .forEach((id) => mark(id, isAllowed(words, id) ? [234, 179, 8] : [225, 29, 72]));
    mark(Number(inspector.dataset.token), [30, 27, 75]);
    ctx.putImageData(image, 0, 0);
    canvas.onmousemove = async (event) => {
      const rect = canvas.getBoundingClientRect();
      const col = Math.floor(((event.clientX - rect.left) / rect.width) * cols);
      const row = Math.floor(((event.clientY - rect.top) / rect.height) * rows);
      const id = row * cols + col;
      if (id < 0 || id >= vocabSize) return;
      const vocab = await loadVocab();
      $("#mask-hover").textContent = `id ${id} ${JSON.stringify(vocab[id] ?? "")} · ${isAllowed(words, id) ? "allowed" : "blocked"}`;
    };
    const search = $("#token-search");
    if (search) search.oninput = () => searchTokens(search.value, words, vocabSize);
    nameProbeTokens();
  }

  async function nameProbeTokens() {
    const named = $$("#inspector .probe-token");
    if (!named.length) return;
    const vocab = await loadVocab();
    named.forEach((el) => { el.textContent = `${JSON.stringify(vocab[Number(el.dataset.tokenId)] ?? "")} (id ${el.dataset.tokenId})`; });
  }

  async function searchTokens(query, words, vocabSize) {
    const list = $("#search-results");
    list.innerHTML = "";
    if (!query) return;
    const vocab = await loadVocab();
    const exact = [], prefix = [];
    for (let id = 0; id < Math.min(vocab.length, vocabSize); id++) {
      const text = vocab[id];
      if (text === query) exact.push(id);
      else if (prefix.length < 12 && text.startsWith(query)) prefix.push(id);
    }
    if (!exact.length && !prefix.length) {
      list.innerHTML = '<li class="muted">no token has this text</li>';
      return;
    }
    for (const id of [...exact, ...prefix]) {
      const li = document.createElement("li");
      const ok = isAllowed(words, id);
      li.className = ok ? "allowed" : "blocked";
      li.textContent = `${ok ? "✓ allowed" : "✗ blocked"}  ${visible(vocab[id])}  (id ${id})${exact.includes(id) ? "" : " · starts with it"}`;
      list.appendChild(li);
    }
  }

  // ---------- timeline ----------
  function drawTimeline() {
    const canvas = $("#timeline");
    if (!canvas) return;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    const scale = window.devicePixelRatio || 1;
    canvas.width = width * scale;
    canvas.height = height * scale;
    const ctx = canvas.getContext("2d");
    ctx.scale(scale, scale);
    ctx.clearRect(0, 0, width, height);
    const chips = $$("#tokens .chip");
    if (!chips.length) return;
    const n = Math.max(chips.length, 32);
    const w = width / n;
    const data = chips.map((c) => ({ depth: Number(c.dataset.depth), allowed: Number(c.dataset.allowed),
                                     blocked: Number(c.dataset.blocked), vocab: Number(c.dataset.vocab),
                                     disagree: c.dataset.agree === "false" }));
    const maxDepth = Math.max(1, ...data.map((d) => d.depth));
    const logVocab = Math.log10(data[0].vocab || 49152);
    ctx.fillStyle = "rgba(225, 29, 72, 0.45)";
    data.forEach((d, i) => { const h = d.blocked * (height - 4); ctx.fillRect(i * w, height - h, Math.max(w - 0.5, 0.5), h); });
    ctx.strokeStyle = "#0d9488"; ctx.lineWidth = 1.5; ctx.beginPath();
    data.forEach((d, i) => {
      const y = height - 2 - (Math.log10(Math.max(d.allowed, 1)) / logVocab) * (height - 6);
      if (i === 0) ctx.moveTo(i * w, y); else ctx.lineTo(i * w, y);
      ctx.lineTo((i + 1) * w, y);
    });
    ctx.stroke();
    ctx.strokeStyle = "#4f46e5"; ctx.lineWidth = 2; ctx.beginPath();
    data.forEach((d, i) => {
      const y = height - 2 - (d.depth / maxDepth) * (height - 10);
      if (i === 0) ctx.moveTo(0, y); else ctx.lineTo(i * w, y);
      ctx.lineTo((i + 1) * w, y);
    });
    ctx.stroke();
    // Steps where the mask and accept_token disagreed: a full-height amber mark.
    ctx.fillStyle = "rgba(180, 83, 9, 0.85)";
    data.forEach((d, i) => { if (d.disagree) ctx.fillRect(i * w, 0, Math.max(w - 0.5, 2), height); });
    (window.maskscopeTimelineHooks || []).forEach((hook) => hook(ctx, chips, w, height));
    if (ui.selected !== null && ui.selected < data.length) {
      ctx.fillStyle = "rgba(30, 27, 75, 0.18)";
      ctx.fillRect(ui.selected * w, 0, Math.max(w, 2), height);
    }
    canvas.onclick = (event) => {
      const rect = canvas.getBoundingClientRect();
      const index = Math.floor(((event.clientX - rect.left) / rect.width) * n);
      if (index >= 0 && index < data.length) select(index);
    };
  }

  // ---------- reacting to swaps ----------
  let refreshQueued = false;
  function refresh() {
    if (refreshQueued) return;
    refreshQueued = true;
    requestAnimationFrame(() => {
      refreshQueued = false;
      const chips = $$("#tokens .chip");
      chips.forEach((c) => c.removeAttribute("data-bitmask"));  // the inspector fetches its own
      if (ui.running && ui.follow && chips.length) {
        const last = chips.length - 1;
        if (ui.selected !== last) { ui.selected = last; inspect(last); }
      }
      markSelected();
      drawTimeline();
      const tokens = $("#tokens");
      if (tokens && ui.follow) tokens.scrollTop = tokens.scrollHeight;
    });
  }

  function onSwap(event) {
    const target = event.detail && (event.detail.target || event.detail.elt);
    if (!target) return;
    if (target.id === "compile-result" || $("#compile-result") === target) markCompileError();
    if (target.id === "doctor-result" || $("#doctor-result") === target) markDoctor();
    if ($("#inspector") && $("#inspector").contains(target) || target.id === "inspector") { drawMask(); markSelected(); }
    refresh();
  }

  function showToast() {
    const toast = $("#toast");
    if (!toast.textContent.trim()) return;
    toast.classList.add("show");
    clearTimeout(showToast.timer);
    showToast.timer = setTimeout(() => toast.classList.remove("show"), 7000);
  }

  function bind() {
    setupEditor();
    const form = $("#config");
    form.addEventListener("input", (event) => {
      if (event.target.closest(".editor")) return;
      configChanged(event.target.classList.contains("compile-opt"));
    });
    form.addEventListener("change", (event) => {
      if (event.target.name === "kind") setKind(event.target.value);
      else if (event.target.name === "preset") applyPreset(event.target.value);
      else if (event.target.name === "prompt_mode") setPromptMode(event.target.value);
      configChanged(event.target.classList.contains("compile-opt") || event.target.name === "kind");
    });
    $("#example").addEventListener("change", (event) => loadExample(event.target.value));
    $$(".compile-panel .tab-button").forEach((b) => b.addEventListener("click", () => setCompileView(b.dataset.view)));
    $("#btn-step").addEventListener("click", () => enqueue(step));
    $("#btn-back").addEventListener("click", () => enqueue(back));
    $("#btn-run").addEventListener("click", () => enqueue(runOrPause));
    $("#btn-reset").addEventListener("click", reset);
    $("#btn-share").addEventListener("click", () => enqueue(share));
    $$('input[name="mode"]').forEach((radio) => radio.addEventListener("change", () => {
      const replay = $('input[name="mode"]:checked').value === "replay";
      $(".generate-view").hidden = replay;
      $(".replay-view").hidden = !replay;
      $("#controls").classList.toggle("inactive", replay);
    }));
    document.addEventListener("click", (event) => {
      const chip = event.target.closest(".chip");
      if (!chip) return;
      if (chip.closest("#tokens")) select(Number(chip.dataset.index));
      else if (chip.closest("#replay-result")) {
        $$("#replay-result .chip.selected").forEach((c) => c.classList.remove("selected"));
        chip.classList.add("selected");
        htmx.ajax("POST", `/ui/replay/${chip.dataset.index}`, { source: "#btn-replay", target: "#inspector", swap: "outerHTML" });
      }
    });
    document.addEventListener("keydown", (event) => {
      const t = event.target;
      if (t.closest("input, textarea, select, [contenteditable='true'], .cm-editor")) return;
      if (event.key === "ArrowRight") { event.preventDefault(); enqueue(step); }
      else if (event.key === "ArrowLeft") { event.preventDefault(); enqueue(back); }
      else if (event.key === " ") { event.preventDefault(); enqueue(runOrPause); }
    });
    document.body.addEventListener("htmx:afterRequest", (event) => {
      if (event.detail.xhr && event.detail.xhr.status === 410 && ui.sessionId) {
        // Expired or evicted: the toast says why; the next Step or Run starts a new session.
        ui.sessionId = null;
        ui.dirty = true;
        setRunning(false);
        const status = $("#status");
        if (status) status.insertAdjacentHTML("beforeend", '<span class="badge bad">session ended: the next step starts a new one</span>');
      }
    });
    document.body.addEventListener("htmx:afterSettle", onSwap);
    document.body.addEventListener("htmx:oobAfterSwap", onSwap);
    document.body.addEventListener("htmx:sseMessage", refresh);
    document.body.addEventListener("htmx:sseClose", () => {
      setRunning(false);
      const runner = $("#runner");
      if (runner) runner.outerHTML = '<div id="runner"></div>';
      refresh();
    });
    new MutationObserver(showToast).observe($("#toast"), { childList: true, subtree: true });
    document.body.addEventListener("htmx:validation:failed", (event) => {
      const field = event.detail.elt;
      $("#toast").innerHTML = "";
      const body = document.createElement("div");
      body.className = "toast-body";
      body.textContent = `${field.name.replace(/_/g, " ")}: ${event.detail.message}`;
      $("#toast").appendChild(body);
      field.focus();
    });
    window.addEventListener("resize", drawTimeline);
    setPromptMode(($('input[name="prompt_mode"]:checked') || { value: "chat" }).value);
    const initial = $("#example").value;
    if ($("#source").value) htmx.trigger(document.body, "compile");
    else if (initial) loadExample(initial);
    const banner = $("#permalink-banner");
    if (banner) enqueue(() => openPermalink(banner.dataset.permalink));
  }

  document.addEventListener("DOMContentLoaded", bind);
  window.maskscope = { ui, select, step, back, runOrPause, reset };
})();
