// The session: opening one from the form, step, back, run/pause, force, reset, share; the status
// counter during a run; restoring the tokens a force discarded; copying the output.
(() => {
  "use strict";
  const { $, $$, ui, toast } = MS;
  const EMPTY_HINT = '<p class="muted empty">Press <kbd>space</kbd> to run, or <kbd>→</kbd> to take one step.</p>';

  function adoptSession() {
    const session = $("#session");
    if (!session) return null;
    ui.sessionId = session.dataset.sessionId;
    ui.dirty = false;
    ui.selected = null;
    ui.follow = true;
    ui.discarded = null;
    $("#session-area").classList.remove("stale");
    const link = $("#download-trace");
    link.href = MS.url(`/api/sessions/${ui.sessionId}/trace`);
    link.classList.remove("disabled");
    $("#share-result").innerHTML = "";
    return ui.sessionId;
  }

  async function ensureSession() {
    if (ui.sessionId && !ui.dirty) return ui.sessionId;
    if (!MS.source().trim()) {
      toast("Pick an example or write a schema: the source is empty.");
      return null;
    }
    await htmx.ajax("POST", "/ui/sessions", { source: "#config", target: "#session-area", swap: "innerHTML" });
    MS.resetInspector();
    return adoptSession();
  }

  // A permalink opens on its own model, or on `model` (the picker's) when asked.
  async function openPermalink(id, model = null) {
    const values = model ? { model } : {};
    await htmx.ajax("POST", `/ui/permalinks/${encodeURIComponent(id)}/open`, { target: "#session-area", swap: "innerHTML", values });
    adoptSession();
    MS.refresh();
  }

  async function share() {
    if (!ui.sessionId || ui.dirty) {
      toast("Step or run first: a permalink holds a session.");
      return;
    }
    const tests = window.maskscopeTests ? window.maskscopeTests.json() : "[]";  // static/tests.js
    await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/share`, { target: "#share-result", swap: "innerHTML", values: { tests } });
    const link = $("#share-result .share-link");
    if (!link) return;
    link.querySelector("input").select();
    try { await navigator.clipboard.writeText(link.dataset.url); link.classList.add("copied"); }
    catch (error) { document.execCommand && document.execCommand("copy"); }
  }

  const sessionDone = () => { const s = $("#status"); return Boolean(s && s.dataset.done === "true"); };
  const chipCount = () => $$("#tokens .chip").length;

  async function step(n = 1) {
    if (ui.running) return;
    const id = await ensureSession();
    if (!id || sessionDone()) return;
    ui.follow = true;
    await htmx.ajax("POST", `/ui/sessions/${id}/step`, { target: "#tokens", swap: "beforeend", values: { n } });
  }

  async function back() {
    if (ui.running || !ui.sessionId || ui.dirty) return;
    if (ui.discarded && chipCount() === ui.discarded.at + 1) return restoreDiscarded();
    ui.discarded = null;
    await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/back`, { target: "#tokens", swap: "beforeend" });
  }

  async function runOrPause() {
    if (ui.running) {
      await fetch(MS.url(`/ui/sessions/${ui.sessionId}/pause`), { method: "POST", headers: MS.csrfHeaders() });
      return;
    }
    const id = await ensureSession();
    if (!id || sessionDone()) return;
    ui.follow = true;
    ui.discarded = null;
    setRunning(true);
    await htmx.ajax("POST", `/ui/sessions/${id}/run`, { target: "#runner", swap: "outerHTML" });
  }

  // A change of setup mid-run: the stream is closed at once (removing its element closes the
  // EventSource; the server stops generating when the client leaves) and asked to pause.
  function stopRun() {
    const id = ui.sessionId;
    setRunning(false);
    const runner = $("#runner");
    if (runner) runner.outerHTML = '<div id="runner"></div>';
    if (id) fetch(MS.url(`/ui/sessions/${id}/pause`), { method: "POST", headers: MS.csrfHeaders() }).catch(() => {});
  }

  function runEnded() {
    setRunning(false);
    const runner = $("#runner");
    if (runner) runner.outerHTML = '<div id="runner"></div>';
    const n = chipCount();
    if (n && !$("#session-area").classList.contains("stale")) MS.select(n - 1);
    MS.refresh();
  }

  // Forcing at an earlier step replaces that token and drops the ones after it: ask first, and
  // remember them so that Back can bring them back (back, then the same steps and forces again:
  // the draw at step i depends only on the seed and i, so the same tokens come back). A token the
  // mask blocks is refused by the server with the reason and changes nothing: no question then.
  async function force(tokenId, at, allowed = true) {
    const chips = $$("#tokens .chip");
    const later = chips.slice(at);
    if (allowed && later.length > 1) {
      const ok = window.confirm(`Forcing here replaces token #${at} and discards the ${later.length - 1} tokens after it. ← Back right after brings them back. Force?`);
      if (!ok) return;
    }
    const discarded = later.map((c) => ({ token: Number(c.dataset.tokenId), forced: c.classList.contains("forced") }));
    await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/force`, { target: "#tokens", swap: "beforeend", values: { token_id: tokenId, at } });
    if (chipCount() === at + 1 && $(`#tok-${at}`).dataset.tokenId === String(tokenId) && discarded.length) {
      ui.discarded = { at, steps: discarded };
      showDiscarded();
    }
  }

  function showDiscarded() {
    const note = $("#discarded-note");
    if (!note) return;
    note.hidden = !ui.discarded;
    if (ui.discarded) note.textContent = `Forced at #${ui.discarded.at}: ${ui.discarded.steps.length} tokens from there on were discarded. ← Back restores them.`;
  }

  async function restoreDiscarded() {
    const { at, steps } = ui.discarded;
    ui.discarded = null;
    showDiscarded();
    await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/back`, { target: "#tokens", swap: "beforeend" });
    let i = 0;
    while (i < steps.length) {
      if (steps[i].forced) {
        await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/force`, { target: "#tokens", swap: "beforeend", values: { token_id: steps[i].token, at: at + i } });
        i++;
        continue;
      }
      let n = 0;
      while (i + n < steps.length && !steps[i + n].forced) n++;
      await htmx.ajax("POST", `/ui/sessions/${ui.sessionId}/step`, { target: "#tokens", swap: "beforeend", values: { n } });
      i += n;
    }
  }

  function reset() {
    if (ui.running) stopRun();
    ui.sessionId = null;
    ui.dirty = true;
    ui.discarded = null;
    $("#session-area").classList.remove("stale");
    $("#session-area").innerHTML = EMPTY_HINT;
    $("#prompt-rendered").innerHTML = "";
    MS.resetInspector();
    MS.drawTimeline();
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

  // The counter follows the chips as they stream; the server's status replaces it at the end.
  function updateCounter() {
    const count = $("#status .count");
    const session = $("#session");
    if (!count || !session) return;
    count.textContent = `${chipCount()} / ${session.dataset.maxTokens} steps`;
  }

  // The output exactly as the server holds it (special tokens add nothing), not the chips' text.
  async function copyOutput(button) {
    if (!ui.sessionId) return;
    const response = await fetch(MS.url(`/api/sessions/${ui.sessionId}`));
    if (!response.ok) return;
    const { text } = await response.json();
    try { await navigator.clipboard.writeText(text); }
    catch (error) {
      const area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.dataset.copied = text;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy output"; }, 1500);
  }

  function onSessionEnded() {
    // Expired or evicted: the toast says why; the next Step or Run starts a new session.
    ui.sessionId = null;
    ui.dirty = true;
    setRunning(false);
    const status = $("#status");
    if (status) status.insertAdjacentHTML("beforeend", '<span class="badge bad">session ended: the next step starts a new one</span>');
  }

  // The server is stopping (SIGTERM): its stream ends with `shutdown` instead of `end`. Close it
  // (no reconnecting to a server going away) and say so in the status line.
  function onServerShutdown(source) {
    source.close();
    setRunning(false);
    const runner = $("#runner");
    if (runner) runner.outerHTML = '<div id="runner"></div>';
    const status = $("#status");
    if (status) status.insertAdjacentHTML("beforeend", '<span class="badge bad restarting">the server is restarting</span>');
  }
  document.addEventListener("htmx:sseOpen", (event) => {
    const source = event.detail.source;
    source.addEventListener("shutdown", () => onServerShutdown(source));
  });

  Object.assign(MS, { ensureSession, openPermalink, share, step, back, runOrPause, stopRun, runEnded,
                      force, reset, setRunning, updateCounter, copyOutput, onSessionEnded, showDiscarded });
})();
