// The setup: compile options and their presets, the example picker, the prompt mode, and what a
// change of setup does to the output on screen (stops a run, marks the output as the old setup's).
(() => {
  "use strict";
  const { $, $$, ui } = MS;

  // Any change of setup: the next step starts a new session; a run stops; the output shown so far
  // is marked as belonging to the previous setup (its verdict no longer speaks for this schema).
  // A change of the grammar's setup (kind, source, options, engine, model) is a new setup: the
  // answers still in flight for the old one are dropped (app.js), and its Doctor findings and
  // marks, its replay and its notes go (issue 26, problems 2 and 4).
  function configChanged(recompile) {
    ui.dirty = true;
    if (recompile) {
      ui.setup++;
      MS.clearSetupMarks();
      MS.dropReplay();
      if (!MS.source().trim()) MS.showEmptyHint();
      else htmx.trigger(document.body, "compile");
      if (ui.replayDiagnostics && ui.replayDiagnostics.length) MS.markReplayLine(0, "");
    }
    MS.clearDiscarded();
    if (ui.sessionId) markStale();
    MS.updateControls();
  }

  function markStale() {
    const area = $("#session-area");
    if (ui.running) MS.stopRun();
    if (!area || area.classList.contains("stale") || !$("#session", area)) return;
    area.classList.add("stale");
    const inspector = $("#inspector");  // its step belongs to the old output too (C9)
    if (inspector && inspector.dataset.session) inspector.classList.add("stale");
    const note = document.createElement("p");
    note.className = "stale-note";
    note.textContent = "This output belongs to the previous setup (schema, kind, options, example or prompt changed). Step or Run starts a new session.";
    area.prepend(note);
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

  // An option edited by hand no longer is the preset's: the picker says "custom".
  function optionEdited(field) {
    if (["preset", "root_model", "model"].includes(field.name)) return;
    $("#preset").value = "custom";
  }

  // Another kind or example is another setup: what was kept for the old one (its Tests,
  // static/tests.js) goes with it. The permalink being opened loads through neither.
  function replaceSetup() {
    document.body.dispatchEvent(new CustomEvent("setup-replaced"));
  }

  async function loadExample(id) {
    if (!id) return;
    const response = await fetch(MS.url(MS.path("example", { example_id: id })));
    if (!response.ok) return;
    const example = await response.json();
    const form = $("#config");
    Object.assign(ui.sources, example.sources);
    replaceSetup();
    const kind = example.kind === "tools" ? "tools" : ui.kind === "pydantic" ? "pydantic" : "json_schema";
    if (ui.kind !== kind) MS.setKind(kind); else MS.setSource(example.sources[kind]);
    form.system.value = example.system;
    form.user.value = example.prompt;
    form.max_tokens.value = example.max_tokens;
    form.schema_in_prompt.checked = example.schema_in_prompt;
    setPromptMode("chat");
    history.replaceState(null, "", MS.url(`/?example=${encodeURIComponent(id)}`));
    configChanged(true);
  }

  function setPromptMode(mode) {
    $$('input[name="prompt_mode"]').forEach((r) => { r.checked = r.value === mode; });
    $(".chat-fields").hidden = mode !== "chat";
    $(".raw-fields").hidden = mode !== "raw";
  }

  // The model picker: while a model is not ready, its option is disabled and says why; the list
  // is asked again until every model is ready, and a model that becomes ready is enabled (the
  // picked one recompiles with its tokenizer).
  // A tokenizer-only model loads on its first use: it is waited for only once picked.
  const MODELS_POLL_MS = 3000;
  let watching = false, timer = null;
  const settled = (o) => o.dataset.ready === "true" || (o.dataset.kind === "tokenizer" && !o.selected);
  async function watchModels() {
    const picker = $("#model");
    if (watching || !picker || $$("option", picker).every(settled)) return;
    watching = true;
    try {
      const response = await fetch(MS.url(MS.path("models")));
      if (response.ok) updateModels(picker, await response.json());
    } catch (error) { /* the server is away: ask again */ }
    watching = false;
    clearTimeout(timer);  // one chain of polls, however often it is started
    timer = setTimeout(watchModels, MODELS_POLL_MS);
  }

  function updateModels(picker, models) {
    for (const m of models) {
      const option = $$("option", picker).find((o) => o.value === m.id);
      if (!option || option.dataset.ready === String(m.ready)) continue;
      option.dataset.ready = String(m.ready);
      option.disabled = !m.ready && m.kind !== "tokenizer";  // picking one starts its load
      option.textContent = m.ready ? `${m.id} · ${m.model}` : `${m.id} · ${m.model} (not ready: ${m.reason})`;
      option.title = `${m.kind} · ${m.model}${m.url ? ` at ${m.url}` : ""} · ${m.ready ? `ready (${m.vocab_size} tokens)` : `not ready: ${m.reason}`}`;
      if (m.ready && option.selected) configChanged(true);
    }
  }

  function bindConfig() {
    const form = $("#config");
    form.addEventListener("input", (event) => {
      if (event.target.closest(".editor")) return;
      const option = event.target.classList.contains("compile-opt");
      if (option) optionEdited(event.target);
      configChanged(option);
    });
    form.addEventListener("change", (event) => {
      const t = event.target;
      if (t.name === "kind") { MS.setKind(t.value); replaceSetup(); }
      else if (t.name === "preset") applyPreset(t.value);
      else if (t.name === "prompt_mode") setPromptMode(t.value);
      else if (t.classList.contains("compile-opt") && t.type === "checkbox") optionEdited(t);
      configChanged(t.classList.contains("compile-opt") || t.name === "kind");
      if (t.id === "model") watchModels();  // a tokenizer-only model picked: wait for its load
      if (t.tagName === "SELECT") t.blur();  // keys go back to the page
    });
    $("#example").addEventListener("change", (event) => {
      event.target.blur();  // the shortcuts (space, →) work at once after a pick
      // in the action queue: a key pressed before the example has loaded acts on it, not on
      // the setup it replaces
      MS.enqueue(() => loadExample(event.target.value));
    });
    setPromptMode(($('input[name="prompt_mode"]:checked') || { value: "chat" }).value);
    watchModels();
  }

  Object.assign(MS, { configChanged, markStale, loadExample, setPromptMode, bindConfig });
})();
