// Breakpoints and alarms on the page: a run that stops on a breakpoint says which condition
// held (the stream's `break` event), selects its step and offers Continue, which passes the
// break (POST .../resume: it never stops the run at that step again) and runs on. The timeline
// marks every step an alarm held at (an orange tick along its top).
(() => {
  "use strict";
  const { $, ui } = MS;

  function showBreak(hit) {
    const note = $("#break-note");
    if (!note) return;
    note.hidden = !hit;
    note.dataset.index = hit ? String(hit.index) : "";
    if (hit) $("#break-text").textContent = `Stopped at #${hit.index}: ${hit.label}`;
  }

  function onBreak(event) {
    let hit = null;
    try { hit = JSON.parse(event.data); } catch (_) { return; }
    showBreak(hit);
    MS.select(hit.index);  // its step event came first: the chip is there
  }

  async function continueRun() {
    const id = ui.sessionId;
    showBreak(null);
    if (!id) return;
    await fetch(MS.url(MS.path("resume", { session_id: id })), { method: "POST", headers: MS.csrfHeaders() });
    MS.runOrPause();
  }

  function markAlarms(ctx, chips, w, height) {
    const canvas = $("#timeline");
    const marked = [];
    ctx.fillStyle = "rgba(194, 65, 12, 0.95)";
    chips.forEach((c, i) => {
      if (!c.dataset.alarms) return;
      marked.push(i);
      ctx.fillRect(i * w, 0, Math.max(w - 0.5, 2), 4);
    });
    if (canvas) canvas.dataset.alarms = marked.join(",");
  }

  (window.maskscopeTimelineHooks = window.maskscopeTimelineHooks || []).push(markAlarms);
  document.addEventListener("htmx:sseOpen", (event) => {
    showBreak(null);
    event.detail.source.addEventListener("break", onBreak);
  });
  document.addEventListener("click", (event) => {
    if (event.target.closest("#btn-continue")) continueRun();
  });

  Object.assign(MS, { showBreak });
})();
