// Maskscope playground: binds the pieces in static/playground/ to the page. Everything else is
// server-rendered HTML that htmx swaps in; after each swap, `refresh` brings the pictures, the
// selection and the counters up to date, whatever caused the swap.
(() => {
  "use strict";
  const { $, $$, ui } = MS;

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
        if (ui.selected !== last) { ui.selected = last; MS.inspect(last); }
      }
      MS.drawInspectorIfNew();
      MS.markSelected();
      MS.updateCounter();
      MS.updateControls();
      MS.applyChipFilter();
      MS.drawTimeline();
      const tokens = $("#tokens");
      if (tokens && ui.follow) tokens.scrollTop = tokens.scrollHeight;
    });
  }

  function onSwap(event) {
    const target = event.detail && (event.detail.target || event.detail.elt);
    if (!target) return;
    if (target.id === "compile-result" || $("#compile-result") === target) MS.markCompileError();
    if (target.id === "doctor-result" || $("#doctor-result") === target) MS.markDoctor();
    if (target.id === "replay-result" || $("#replay-result") === target) MS.onReplayResult();
    refresh();
  }

  function showToast() {
    const toast = $("#toast");
    if (!toast.textContent.trim()) return;
    toast.classList.add("show");
    clearTimeout(showToast.timer);
    showToast.timer = setTimeout(() => toast.classList.remove("show"), 7000);
  }

  // Chips: only those where the mask changed the model's choice, when the filter is on.
  function applyChipFilter() {
    const only = $("#filter-changed");
    const tokens = $("#tokens");
    if (tokens) tokens.classList.toggle("only-changed", Boolean(only && only.checked));
  }

  function bindButtons() {
    $("#btn-step").addEventListener("click", () => MS.enqueue(() => MS.step()));
    $("#btn-back").addEventListener("click", () => MS.enqueue(MS.back));
    $("#btn-run").addEventListener("click", () => MS.enqueue(MS.runOrPause));
    $("#btn-reset").addEventListener("click", MS.reset);
    $("#btn-share").addEventListener("click", () => MS.enqueue(MS.share));
    $("#btn-copy-output").addEventListener("click", (event) => MS.copyOutput(event.currentTarget));
    $("#filter-changed").addEventListener("change", (event) => { applyChipFilter(); event.target.blur(); });
    $$(".compile-panel .tab-button").forEach((b) => b.addEventListener("click", () => MS.setCompileView(b.dataset.view)));
    document.addEventListener("click", (event) => {
      const forceButton = event.target.closest("#inspector button.force");
      if (forceButton) {
        const { tokenId, at, allowed } = forceButton.dataset;
        MS.enqueue(() => MS.force(Number(tokenId), Number(at), allowed === "true"));
        return;
      }
      const chip = event.target.closest(".chip");
      if (!chip) return;
      if (chip.closest("#tokens")) MS.select(Number(chip.dataset.index));
      else if (chip.closest("#replay-result")) MS.selectReplayToken(Number(chip.dataset.index));
    });
  }

  function bindHtmx() {
    // An answer for a setup, session or replay the page no longer shows is dropped unswapped.
    document.body.addEventListener("htmx:beforeRequest", (event) => {
      const { elt, xhr } = event.detail;
      if (xhr && elt) xhr.msScope = elt.msScope;
    });
    document.body.addEventListener("htmx:beforeSwap", (event) => {
      const xhr = event.detail.xhr;
      if (xhr && MS.isStale(xhr.msScope)) {
        event.detail.shouldSwap = false;
        event.detail.isError = false;
      }
    });
    // No answer at all (the server is away): said, not left as a spinner that never stops.
    document.body.addEventListener("htmx:sendError", () => MS.toast("The server did not answer: is it still running? Try again in a moment."));
    document.body.addEventListener("htmx:afterRequest", (event) => {
      if (event.detail.xhr && event.detail.xhr.status === 410 && ui.sessionId) MS.onSessionEnded();
    });
    document.body.addEventListener("htmx:afterSettle", onSwap);
    document.body.addEventListener("htmx:oobAfterSwap", onSwap);
    document.body.addEventListener("htmx:sseMessage", refresh);
    document.body.addEventListener("htmx:sseClose", MS.runEnded);
    new MutationObserver(showToast).observe($("#toast"), { childList: true, subtree: true });
    document.body.addEventListener("htmx:validation:failed", (event) => {
      const field = event.detail.elt;
      MS.toast(`${field.name.replace(/_/g, " ")}: ${event.detail.message}`);
      field.focus();
    });
  }

  function bind() {
    MS.setupEditor(() => MS.configChanged(true));
    MS.bindConfig();
    MS.bindTools();
    MS.bindReplay();
    MS.bindKeys();
    bindButtons();
    bindHtmx();
    window.addEventListener("resize", MS.drawTimeline);
    const initial = $("#example").value;
    if ($("#source").value) htmx.trigger(document.body, "compile");
    else if (initial) MS.loadExample(initial);
    const banner = $("#permalink-banner");
    // A permalink made on a model not configured here opens only when asked, on the picked one.
    if (banner && !banner.dataset.modelMissing) MS.enqueue(() => MS.openPermalink(banner.dataset.permalink));
    const elsewhere = $("#btn-open-elsewhere");
    if (elsewhere) elsewhere.addEventListener("click", () => MS.enqueue(() => MS.openPermalink(banner.dataset.permalink, $("#model").value)));
  }

  Object.assign(MS, { refresh, applyChipFilter });
  // Bound at once, not in bind(): htmx may send a request while it first processes the page.
  // Every request names the session and the setup (csrfHeaders adds them) and carries what it
  // belongs to, read when it is sent (core.js, scopeOf).
  document.addEventListener("htmx:configRequest", (event) => {
    const { headers, elt, parameters } = event.detail;
    const path = MS.appPath(event.detail.path);
    Object.assign(headers, MS.csrfHeaders());
    if (elt) elt.msScope = MS.scopeOf(path);
    if (MS.isRoute(path, "replay")) {  // what the inspector replays: the inputs of the replay shown
      const read = (name) => (parameters.get ? parameters.get(name) : parameters[name]);
      ui.replayText = read("text");
      ui.replayIds = read("token_ids") ?? "";
      ui.replayLog = read("log") ?? "";
    }
  });
  // The setup form is never submitted (the CSP refuses an inline onsubmit): htmx posts it.
  document.addEventListener("submit", (event) => { if (event.target.id === "config") event.preventDefault(); });
  document.addEventListener("DOMContentLoaded", bind);
  // The public handle other scripts (export.js) and tests use.
  window.maskscope = { ui, select: MS.select, step: MS.step, back: MS.back, runOrPause: MS.runOrPause, reset: MS.reset };
})();
