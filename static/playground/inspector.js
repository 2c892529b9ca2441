// The step inspector: which step is selected, the bitmask picture, and the token search; any
// allowed token (the allowed list, the top tokens, the search, a cell of the picture) can be
// forced at the step shown.
// The picture is drawn whenever a new inspector is in the page, whatever put it there (a step, a
// force, back, a click, a run, a replayed token): `drawInspectorIfNew` runs after every swap.
(() => {
  "use strict";
  const { $, $$, ui, isAllowed, visible } = MS;
  const EMPTY = '<section id="inspector" class="inspector panel"><p class="muted empty">Select a step (click a token or the timeline) to see its mask.</p></section>';

  function select(index) {
    if (!ui.sessionId) return;
    const chips = $$("#tokens .chip");
    if (index < 0 || index >= chips.length) return;
    ui.follow = index === chips.length - 1;
    ui.selected = index;
    markSelected();
    inspect(index);
  }

  // Whether the inspector shows step `index` of the page's session already.
  function shows(index) {
    const inspector = $("#inspector");
    return Boolean(inspector && !inspector.dataset.replay && inspector.dataset.session === ui.sessionId
                   && inspector.dataset.index === String(index));
  }

  // One inspector request at a time; the newest wanted index wins, and a step shown or in
  // flight is not fetched again (during a run: one fetch per step at most).
  function inspect(index) {
    ui.inspectorWanted = index;
    if (ui.inspectorBusy) return;
    if (shows(index)) { ui.inspectorWanted = null; return; }
    ui.inspectorBusy = true;
    ui.requestedIndex = index;
    // A request that never got an answer (the server went away) rejects with nothing to say.
    MS.request("inspector", "GET", MS.path("inspect", { session_id: ui.sessionId, index }), { target: "#inspector", swap: "outerHTML" })
      .catch(() => {})
      .finally(() => {
        ui.inspectorBusy = false;
        const wanted = ui.inspectorWanted;
        ui.inspectorWanted = null;
        if (wanted !== null && wanted !== index) inspect(wanted);
      });
  }

  function resetInspector() {
    const inspector = $("#inspector");
    if (inspector) inspector.outerHTML = EMPTY;
    ui.drawnInspector = null;
  }

  // The selection is the page's (a click, ←/→, the last step after an action or during a run),
  // never read back from an inspector that may be an older one.
  function markSelected() {
    $$("#tokens .chip.selected").forEach((c) => c.classList.remove("selected"));
    const chip = ui.selected !== null ? $(`#tok-${ui.selected}`) : null;
    if (chip) chip.classList.add("selected");
  }

  // Token texts of the tokenizer of the model the inspector shows (each model's fetched once).
  function loadVocab() {
    const inspector = $("#inspector");
    const model = (inspector && inspector.dataset.model) || "local";
    if (!ui.vocabs[model]) {
      ui.vocabs[model] = fetch(MS.url(MS.path("vocab", {}, { model })))
        .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`no vocabulary for ${model}`))))
        .then((v) => v.tokens)
        .catch((error) => { delete ui.vocabs[model]; throw error; });
    }
    return ui.vocabs[model];
  }

  function decodeBitmask(b64) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const view = new DataView(bytes.buffer);
    const words = new Uint32Array(bytes.length / 4);
    for (let i = 0; i < words.length; i++) words[i] = view.getUint32(i * 4, true);
    return words;
  }

  const COLORS = { allowed: [20, 184, 166], blocked: [226, 232, 240], padding: [248, 250, 252],
                   topAllowed: [234, 179, 8], topBlocked: [225, 29, 72], chosen: [30, 27, 75] };

  function drawInspectorIfNew() {
    const inspector = $("#inspector");
    if (!inspector || inspector === ui.drawnInspector) return;
    ui.drawnInspector = inspector;
    drawMask(inspector);
    nameProbeTokens();
  }

  function drawMask(inspector) {
    const canvas = $("#mask-canvas", inspector);
    if (!canvas || !inspector.dataset.bitmask) return;
    const words = decodeBitmask(inspector.dataset.bitmask);
    const vocabSize = Number(inspector.dataset.vocabSize);
    const cols = 256;
    const rows = Math.ceil(vocabSize / cols);
    canvas.width = cols;
    canvas.height = rows;
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(cols, rows);
    for (let id = 0; id < cols * rows; id++) {
      const rgb = id >= vocabSize ? COLORS.padding : isAllowed(words, id) ? COLORS.allowed : COLORS.blocked;
      image.data.set([...rgb, 255], id * 4);
    }
    const mark = (id, rgb) => { if (id >= 0 && id < vocabSize) image.data.set([...rgb, 255], id * 4); };
    (inspector.dataset.top || "").split(",").filter(Boolean).map(Number)
      .forEach((id) => mark(id, isAllowed(words, id) ? COLORS.topAllowed : COLORS.topBlocked));
    mark(Number(inspector.dataset.token), COLORS.chosen);
    ctx.putImageData(image, 0, 0);
    canvas.onmousemove = (event) => hoverCell(event, canvas, words, vocabSize, cols, rows);
    canvas.onclick = (event) => {
      const id = cellAt(event, canvas, vocabSize, cols, rows);
      if (id !== null && forceable(inspector)) forceHere(inspector, id, isAllowed(words, id));
    };
    const search = $("#token-search", inspector);
    if (search) {
      search.oninput = () => searchTokens(search.value, words, vocabSize);
      if (search.value) search.oninput();  // typed while the inspector was being drawn
    }
  }

  function cellAt(event, canvas, vocabSize, cols, rows) {
    const rect = canvas.getBoundingClientRect();
    const col = Math.floor(((event.clientX - rect.left) / rect.width) * cols);
    const row = Math.floor(((event.clientY - rect.top) / rect.height) * rows);
    const id = row * cols + col;
    return id >= 0 && id < vocabSize && col >= 0 && col < cols ? id : null;
  }

  async function hoverCell(event, canvas, words, vocabSize, cols, rows) {
    const id = cellAt(event, canvas, vocabSize, cols, rows);
    if (id === null) return;
    const vocab = await loadVocab();
    const allowed = isAllowed(words, id);
    const hint = allowed && forceable($("#inspector")) ? " · click to force it here" : "";
    $("#mask-hover").textContent = `id ${id} ${JSON.stringify(vocab[id] ?? "")} · ${allowed ? "allowed" : "blocked"}${hint}`;
  }

  // Forcing needs a step of the page's session (a replayed token has no session to change).
  const forceable = (inspector) => Boolean(inspector && !inspector.dataset.replay && inspector.dataset.session
                                           && inspector.dataset.session === ui.sessionId && !ui.running);

  function forceHere(inspector, tokenId, allowed) {
    const at = Number(inspector.dataset.index);
    MS.enqueue(() => MS.force(tokenId, at, allowed));
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
    const inspector = $("#inspector");
    for (const id of [...exact, ...prefix]) {
      const li = document.createElement("li");
      const ok = isAllowed(words, id);
      li.className = ok ? "allowed" : "blocked";
      li.textContent = `${ok ? "✓ allowed" : "✗ blocked"}  ${visible(vocab[id])}  (id ${id})${exact.includes(id) ? "" : " · starts with it"}`;
      if (ok && forceable(inspector)) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "force";
        button.textContent = "force";
        button.title = `force this token at step ${inspector.dataset.index}`;
        Object.assign(button.dataset, { tokenId: String(id), at: inspector.dataset.index, allowed: "true" });
        li.prepend(button, " ");  // first: the text may run past the list's right edge
      }
      list.appendChild(li);
    }
  }

  // A permalink's recorded chips, while its live session is rebuilt (issue 45, M5): a click opens
  // the step as it was recorded at share time (what its chip holds; the mask picture and the
  // candidates come with the live session, which then opens this same step).
  function inspectRecorded(chip) {
    $$("#recorded-tokens .chip.selected").forEach((c) => c.classList.remove("selected"));
    chip.classList.add("selected");
    ui.recordedPick = Number(chip.dataset.index);
    const d = chip.dataset;
    const section = document.createElement("section");
    section.id = "inspector";
    section.className = "inspector panel recorded-step";
    Object.assign(section.dataset, { recorded: "true", index: d.index, token: d.tokenId });
    const el = (tag, text, cls) => {
      const node = document.createElement(tag);
      if (cls) node.className = cls;
      if (text !== undefined) node.textContent = text;
      return node;
    };
    const head = el("header", undefined, "insp-head");
    const title = el("h2", "Recorded step ");
    title.appendChild(el("b", `#${d.index}`));
    head.append(title, el("span", chip.textContent, "chosen"), el("span", `id ${d.tokenId}`, "muted"),
                el("span", "recorded", "badge"));
    if (d.forced === "true") head.appendChild(el("span", "forced", "badge forced"));
    const note = el("p", "As it was shared: the live session is being rebuilt, and opens this step with its mask, candidates and parser once ready.", "muted recorded-note");
    const facts = el("dl", undefined, "facts");
    const vocab = Number(d.vocab);
    const rows = [
      ["allowed", `${Number(d.allowed).toLocaleString("en")} of ${vocab.toLocaleString("en")} tokens`],
      ["removed by the mask", `${(100 * Number(d.blocked)).toFixed(2)}%`],
      ["p · rank", `${(100 * Number(d.prob)).toFixed(2)}% · rank ${d.rank}`],
      ["jump-forward", d.jump ? visible(d.jump) : "—"],
      ["depth before", d.depth],
      ["after this token", d.terminated === "true" ? "terminated" : "running"],
      ["mask vs accept", d.agree === "true" ? "all agree" : "DISAGREE"],
    ];
    if (d.emptyMask === "true") rows.push(["empty mask", "empty mask: vLLM aborts this request"]);
    for (const [name, value] of rows) facts.append(el("dt", name), el("dd", value));
    section.append(head, note, facts);
    const inspector = $("#inspector");
    if (inspector) inspector.replaceWith(section);
    ui.drawnInspector = section;
  }

  document.addEventListener("click", (event) => {
    const chip = event.target.closest && event.target.closest("#recorded-tokens .chip");
    if (chip) inspectRecorded(chip);
  });

  Object.assign(MS, { select, inspect, resetInspector, markSelected, drawInspectorIfNew, inspectRecorded });
})();
