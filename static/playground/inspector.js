// The step inspector: which step is selected, the bitmask picture, and the token search.
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

  // One inspector request at a time; the newest wanted index wins.
  function inspect(index) {
    ui.inspectorWanted = index;
    if (ui.inspectorBusy) return;
    ui.inspectorBusy = true;
    // A request that never got an answer (the server went away) rejects with nothing to say.
    htmx.ajax("GET", `/ui/sessions/${ui.sessionId}/steps/${index}`, { target: "#inspector", swap: "outerHTML" })
      .catch(() => {})
      .finally(() => {
        ui.inspectorBusy = false;
        if (ui.inspectorWanted !== null && ui.inspectorWanted !== index) inspect(ui.inspectorWanted);
        else ui.inspectorWanted = null;
      });
  }

  function resetInspector() {
    const inspector = $("#inspector");
    if (inspector) inspector.outerHTML = EMPTY;
    ui.drawnInspector = null;
  }

  function markSelected() {
    const inspector = $("#inspector");
    const fromSession = inspector && inspector.dataset.index !== undefined && !inspector.dataset.replay;
    if (fromSession) ui.selected = Number(inspector.dataset.index);
    $$("#tokens .chip.selected").forEach((c) => c.classList.remove("selected"));
    const chip = ui.selected !== null ? $(`#tok-${ui.selected}`) : null;
    if (chip) chip.classList.add("selected");
  }

  // Token texts of the tokenizer of the model the inspector shows (each model's fetched once).
  function loadVocab() {
    const inspector = $("#inspector");
    const model = (inspector && inspector.dataset.model) || "local";
    if (!ui.vocabs[model]) {
      ui.vocabs[model] = fetch(MS.url(`/api/vocab?model=${encodeURIComponent(model)}`))
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
    const search = $("#token-search", inspector);
    if (search) {
      search.oninput = () => searchTokens(search.value, words, vocabSize);
      if (search.value) search.oninput();  // typed while the inspector was being drawn
    }
  }

  async function hoverCell(event, canvas, words, vocabSize, cols, rows) {
    const rect = canvas.getBoundingClientRect();
    const col = Math.floor(((event.clientX - rect.left) / rect.width) * cols);
    const row = Math.floor(((event.clientY - rect.top) / rect.height) * rows);
    const id = row * cols + col;
    if (id < 0 || id >= vocabSize) return;
    const vocab = await loadVocab();
    $("#mask-hover").textContent = `id ${id} ${JSON.stringify(vocab[id] ?? "")} · ${isAllowed(words, id) ? "allowed" : "blocked"}`;
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

  Object.assign(MS, { select, inspect, resetInspector, markSelected, drawInspectorIfNew });
})();
