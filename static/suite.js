// The Suite view: the upload form (a zip, a JSONL, or a folder's files sent by their paths), the
// progress bar fed by the suite's server-sent events, and the table's sorting and filtering.
// Rows are server-rendered (the page and each progress event render the same partial).
(() => {
  "use strict";
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const meta = (name) => { const tag = $(`meta[name="${name}"]`); return tag ? tag.content : ""; };

  // --- the upload -------------------------------------------------------------------------
  function showError(message) {
    const box = $("#suite-error");
    box.textContent = message;
    box.hidden = false;
  }

  async function upload(event) {
    event.preventDefault();
    const form = event.target;
    const data = new FormData();
    const folder = $("#suite-folder").files;
    const file = $("#suite-file").files;
    if (folder.length) {
      // Each file by its path inside the folder: the server reads them as the zip's entries.
      for (const f of folder) data.append("file", f, f.webkitRelativePath || f.name);
    } else if (file.length) {
      data.append("file", file[0], file[0].name);
    } else {
      showError("Pick a zip, a JSONL or a folder first.");
      return;
    }
    const query = new URLSearchParams();
    $$('input[name="stack"]:checked', form).forEach((box) => query.append("stack", box.value));
    $$('input[name="engine"]:checked', form).forEach((box) => query.append("engine", box.value));
    query.set("preset", $("#suite-preset").value);
    $("#suite-submit").disabled = true;
    $("#suite-error").hidden = true;
    try {
      const response = await fetch(`${form.dataset.action}?${query}`, {
        method: "POST", body: data, headers: { "X-CSRF-Token": meta("csrf-token") },
      });
      const body = await response.json().catch(() => ({}));
      if (response.ok) {
        window.location.assign(body.url);
        return;
      }
      const error = body.error || {};
      showError(`${response.status}: ${error.message || response.statusText}`);
    } catch (failure) {
      showError(`The upload failed: ${failure.message}`);
    }
    $("#suite-submit").disabled = false;
  }

  // --- sorting and filtering ----------------------------------------------------------------
  const sorting = { key: null, column: null, descending: false };

  function sortValue(row, key, column) {
    if (key === "name") return row.dataset.name;
    if (key === "kind") return $(".suite-kind", row).textContent;
    const cell = $(`td[data-column="${column}"]`, row);
    return cell ? Number(cell.dataset.rank) : 0;
  }

  function applySort() {
    if (!sorting.key) return;
    const body = $("#suite-rows");
    const rows = $$("tr.suite-row", body);
    const sign = sorting.descending ? -1 : 1;
    rows.sort((a, b) => {
      const x = sortValue(a, sorting.key, sorting.column);
      const y = sortValue(b, sorting.key, sorting.column);
      const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return sign * order || a.dataset.name.localeCompare(b.dataset.name);
    });
    rows.forEach((row) => body.appendChild(row));
  }

  function sortBy(header) {
    const { sort: key, column = null } = header.dataset;
    // A status column sorts failing first on the first click; a name, A to Z.
    const same = sorting.key === key && sorting.column === column;
    sorting.descending = same ? !sorting.descending : key === "column";
    sorting.key = key;
    sorting.column = column;
    $$("#suite-table th.sortable").forEach((th) => th.removeAttribute("aria-sort"));
    header.setAttribute("aria-sort", sorting.descending ? "descending" : "ascending");
    applySort();
  }

  function applyFilter() {
    const text = $("#suite-filter").value.trim().toLowerCase();
    const status = $("#suite-status").value;
    let shown = 0;
    const rows = $$("#suite-rows tr.suite-row");
    rows.forEach((row) => {
      const levels = row.dataset.levels.split(/\s+/);
      const matches = (!text || row.dataset.name.toLowerCase().includes(text))
        && (!status || row.dataset.state === status || levels.includes(status));
      row.hidden = !matches;
      shown += matches ? 1 : 0;
    });
    $("#suite-count").textContent = `${shown} of ${rows.length} sources shown`;
  }

  // --- progress -------------------------------------------------------------------------------
  function replaceRow(html) {
    const holder = document.createElement("tbody");
    holder.innerHTML = html.trim();
    const row = $("tr", holder);
    const old = $$("#suite-rows tr.suite-row").find((r) => r.dataset.name === row.dataset.name);
    if (old) old.replaceWith(row); else $("#suite-rows").appendChild(row);
  }

  function progress(done, total) {
    const bar = $("#suite-progress");
    bar.max = total;
    bar.value = done;
    $("#suite-progress-text").textContent = `${done} / ${total} sources checked`;
  }

  function ended(data) {
    const view = $("#suite");
    view.dataset.status = data.cut_short ? "cut_short" : "done";
    const counts = Object.entries(data.summary.findings).filter(([, n]) => n).map(([level, n]) => `${n} ${level.replace(/_/g, " ")}`);
    let text = `${data.done} of ${data.total} sources checked: ${counts.length ? counts.join(", ") : "no finding"}; ${data.summary.failing} failing.`;
    if (data.unchecked.length) text += ` ${data.unchecked.length} left unchecked (the time limit).`;
    if (data.error) text += ` ${data.error.message}`;
    else if (!data.kept) text += " Not kept: this link lasts while the server runs.";
    $("#suite-summary").textContent = text;
  }

  function watch(view) {
    const source = new EventSource(view.dataset.events);
    source.addEventListener("progress", (event) => {
      const data = JSON.parse(event.data);
      replaceRow(data.row);
      progress(data.done, data.total);
      applySort();
      applyFilter();
    });
    source.addEventListener("end", (event) => {
      source.close();
      const data = JSON.parse(event.data);
      progress(data.done, data.total);
      ended(data);
    });
  }

  function bind() {
    const form = $("#suite-form");
    if (form) form.addEventListener("submit", upload);
    const view = $("#suite");
    if (!view) return;
    $$("#suite-table th.sortable").forEach((th) => th.addEventListener("click", () => sortBy(th)));
    $("#suite-filter").addEventListener("input", applyFilter);
    $("#suite-status").addEventListener("change", applyFilter);
    applyFilter();
    if (view.dataset.status === "running") watch(view);
  }

  document.addEventListener("DOMContentLoaded", bind);
})();
