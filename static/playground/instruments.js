// The instruments beside the output: the shadow continuation (the model with no mask, from the
// selected step, beside the constrained tokens, the first token where they part marked) and the
// per-path table (where the mask fought the model), sortable, each row selecting its steps.
(() => {
  "use strict";
  const { $, $$, ui } = MS;
  const pct = (x) => `${(x * 100).toFixed(1)}%`;

  function tokenRow(label, texts, partsAt) {
    const row = document.createElement("div");
    row.className = "row";
    row.append(`${label} `);
    texts.forEach((text, i) => {
      const span = document.createElement("span");
      span.textContent = MS.visible(text);
      if (i === partsAt) span.className = "parts";
      row.append(span);
    });
    return row;
  }

  async function shadow() {
    const id = ui.sessionId;
    if (!id) return;
    const start = ui.selected ?? 0;
    const box = $("#shadow-result");
    box.hidden = false;
    box.textContent = "running the model with no mask…";
    const response = await fetch(MS.url(MS.path("shadow", { session_id: id })), {
      method: "POST", headers: { ...MS.csrfHeaders(), "Content-Type": "application/json" },
      body: JSON.stringify({ from: start, tokens: 32 }),
    });
    const answer = await response.json();
    if (!response.ok) { box.textContent = answer.error ? answer.error.message : "the shadow failed"; return; }
    const chips = $$("#tokens .chip").slice(start, start + answer.tokens.length);
    const at = answer.parts_at === null ? -1 : answer.parts_at - start;
    box.replaceChildren(
      tokenRow("constrained", chips.map((c) => c.textContent.replace(/·/g, " ").replace(/↵/g, "\n")), at),
      tokenRow("no mask    ", answer.tokens.map((t) => t.text), at),
    );
    const note = document.createElement("p");
    note.textContent = answer.parts_at === null
      ? `from #${start}: the two agree as far as both go`
      : `from #${start}: they part at #${answer.parts_at}; the mask removed ${pct(answer.removed_mass_until)} of the probability up to there`;
    box.dataset.partsAt = answer.parts_at === null ? "" : String(answer.parts_at);
    box.append(note);
  }

  const COLUMNS = [["path", "path"], ["tokens", "tokens"], ["top1_blocked", "top-1 blocked"],
                   ["removed_mass", "mass removed"], ["forced", "forced"]];
  let rows = [];
  let order = { key: "removed_mass", down: true };

  function drawTable() {
    const table = $("#by-path");
    const head = document.createElement("tr");
    COLUMNS.forEach(([key, label]) => {
      const th = document.createElement("th");
      th.textContent = label + (order.key === key ? (order.down ? " ▾" : " ▴") : "");
      th.dataset.key = key;
      head.append(th);
    });
    const sorted = [...rows].sort((a, b) => {
      const x = a[order.key], y = b[order.key];
      const c = typeof x === "string" ? x.localeCompare(y) : x - y;
      return order.down ? -c : c;
    });
    const body = sorted.map((r) => {
      const tr = document.createElement("tr");
      tr.className = "row";
      tr.dataset.steps = r.steps.join(",");
      COLUMNS.forEach(([key]) => {
        const td = document.createElement("td");
        td.textContent = key === "removed_mass" ? r[key].toFixed(3) : String(r[key]);
        tr.append(td);
      });
      return tr;
    });
    table.replaceChildren(head, ...body);
  }

  async function byPath() {
    const id = ui.sessionId;
    if (!id) return;
    const response = await fetch(MS.url(MS.path("byPath", { session_id: id })), { headers: MS.scopeHeaders() });
    if (!response.ok) return;
    rows = await response.json();
    $("#by-path").hidden = false;
    drawTable();
  }

  function onTableClick(event) {
    const th = event.target.closest("#by-path th");
    if (th) {
      order = { key: th.dataset.key, down: order.key === th.dataset.key ? !order.down : true };
      drawTable();
      return;
    }
    const tr = event.target.closest("#by-path tr.row");
    if (!tr) return;
    const steps = tr.dataset.steps.split(",").map(Number);
    $$("#tokens .chip.path-hit").forEach((c) => c.classList.remove("path-hit"));
    steps.forEach((i) => { const chip = $(`#tok-${i}`); if (chip) chip.classList.add("path-hit"); });
    MS.select(steps[0]);
  }

  document.addEventListener("click", (event) => {
    if (event.target.closest("#btn-shadow")) shadow();
    else if (event.target.closest("#btn-by-path")) byPath();
    else onTableClick(event);
  });
})();
