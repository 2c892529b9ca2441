// The session: opening one from the form, step, undo, run/pause, force, reset, share; the status
// counter during a run; the controls that can act; restoring the tokens a force discarded;
// copying the output. Every request goes through MS.request (core.js): it names the session and
// the setup, and an answer for an older one is dropped.
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
    ui.requestedIndex = null;
    clearDiscarded();
    $("#session-area").classList.remove("stale");
    const link = $("#download-trace");
    link.href = MS.url(MS.path("trace", { session_id: ui.sessionId }));
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
    const before = $("#session");
    await MS.request("session", "POST", MS.path("session"), { target: "#session-area", form: true });
    const opened = $("#session");
    // Refused (a 4xx, in the toast) or dropped (the setup changed meanwhile): no session to use.
    if (!opened || opened === before) return null;
    MS.resetInspector();
    return adoptSession();
  }

  // A permalink opens on its own model, or on `model` (the picker's) when asked. While its live
  // session is rebuilt, the progress bar follows the steps replayed (the rebuild is named by a
  // token of this page's, M5); a recorded chip clicked meanwhile is the step opened after.
  async function openPermalink(id, model = null) {
    const rebuild = rebuildToken();
    const values = model ? { model, rebuild } : { rebuild };
    const polling = followRebuild(id, rebuild);
    try {
      await MS.request("session", "POST", MS.path("permalinkOpen", { snapshot_id: id }), { target: "#session-area", values });
    } finally {
      polling.stop();
    }
    const adopted = adoptSession();
    // This very answer inspects the step shared (?step) or the last one: the selection starts
    // there (an inspector of this session, so not an older answer read back).
    const inspector = $("#inspector");
    if (adopted && inspector && inspector.dataset.session === adopted && inspector.dataset.index) {
      ui.selected = Number(inspector.dataset.index);
      ui.follow = ui.selected === $$("#tokens .chip").length - 1;
    }
    const picked = ui.recordedPick;
    ui.recordedPick = null;
    MS.refresh();
    if (adopted && picked !== null && picked !== undefined && picked < chipCount() && picked !== ui.selected) MS.select(picked);
  }

  const rebuildToken = () => Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");

  // The rebuild's progress, asked every REBUILD_POLL_MS until the open request ends: the bar is
  // determinate (value of max) from the first answer that knows the rebuild.
  const REBUILD_POLL_MS = 250;
  function followRebuild(id, rebuild) {
    let stopped = false, timer = null;
    const url = MS.url(MS.path("permalinkProgress", { snapshot_id: id }, { rebuild }));
    async function poll() {
      if (stopped) return;
      try {
        const response = await fetch(url);
        if (response.ok) showRebuild(await response.json());
      } catch (error) { /* the server is busy or away: ask again */ }
      if (!stopped) timer = setTimeout(poll, REBUILD_POLL_MS);
    }
    timer = setTimeout(poll, 0);
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  function showRebuild({ done, total }) {
    const bar = $("#replaying progress");
    if (!bar || done === null || !total) return;
    bar.max = total;
    bar.value = done;
    bar.dataset.done = String(done);
    bar.title = `${done} of ${total} steps rebuilt`;
    const count = $("#replaying .rebuilt");
    if (count) count.textContent = `${done} / ${total}`;
  }

  async function share() {
    if (!ui.sessionId || ui.dirty) {
      toast("Step or run first: a permalink holds a session.");
      return;
    }
    const tests = window.maskscopeTests ? window.maskscopeTests.json() : "[]";  // static/tests.js
    await MS.request("share", "POST", MS.path("share", { session_id: ui.sessionId }), { target: "#share-result", values: { tests } });
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
    clearDiscarded();
    await MS.request("action", "POST", MS.path("step", { session_id: id }), { target: "#tokens", swap: "beforeend", values: { n } });
    followLast();
  }

  // An action's answer (step, undo, force) shows the last step in the inspector (out of band):
  // the selection follows it.
  function followLast() {
    if (ui.running) return;
    const n = chipCount();
    ui.selected = n ? n - 1 : null;
    ui.follow = true;
    MS.markSelected();
  }

  // Undo the last step (Backspace, the Undo button), whichever step is selected; right after a
  // force at an earlier step, it brings back the tokens that force discarded.
  async function back() {
    if (ui.running || !ui.sessionId || ui.dirty || !chipCount()) return;
    if (ui.discarded && chipCount() === ui.discarded.at + 1) return restoreDiscarded();
    clearDiscarded();
    ui.follow = true;
    await MS.request("action", "POST", MS.path("back", { session_id: ui.sessionId }), { target: "#tokens", swap: "beforeend" });
    followLast();
  }

  // ← and → move the selection through the steps; → past the last step takes a new one.
  async function move(delta) {
    const n = chipCount();
    const last = n - 1;
    const current = ui.selected === null ? last : ui.selected;
    if (delta > 0 && (n === 0 || current >= last)) return step();
    const next = Math.max(0, Math.min(last, current + delta));
    if (n && next !== ui.selected) MS.select(next);
  }

  async function runOrPause() {
    if (ui.running) {
      await fetch(MS.url(MS.path("pause", { session_id: ui.sessionId })), { method: "POST", headers: MS.csrfHeaders() });
      return;
    }
    const id = await ensureSession();
    if (!id || sessionDone()) return;
    ui.follow = true;
    clearDiscarded();
    setRunning(true);
    await MS.request("action", "POST", MS.path("run", { session_id: id }), { target: "#runner", swap: "outerHTML" });
    if (!$("#runner[data-running]")) setRunning(false);  // refused: the toast says why
  }

  // A change of setup mid-run: the stream is closed at once (removing its element closes the
  // EventSource; the server stops generating when the client leaves) and asked to pause.
  function stopRun() {
    const id = ui.sessionId;
    setRunning(false);
    const runner = $("#runner");
    if (runner) runner.outerHTML = '<div id="runner"></div>';
    if (id) fetch(MS.url(MS.path("pause", { session_id: id })), { method: "POST", headers: MS.csrfHeaders() }).catch(() => {});
  }

  function runEnded() {
    setRunning(false);
    const runner = $("#runner");
    if (runner) runner.outerHTML = '<div id="runner"></div>';
    clearDiscarded();
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
      const ok = window.confirm(`Forcing here replaces token #${at} and discards ${dropped(later.length - 1)} after it. Undo (Backspace) right after brings them back. Force?`);
      if (!ok) return;
    }
    const discarded = later.map((c) => ({ token: Number(c.dataset.tokenId), forced: c.classList.contains("forced") }));
    const session = ui.sessionId;
    await MS.request("action", "POST", MS.path("force", { session_id: session }), { target: "#tokens", swap: "beforeend", values: { token_id: tokenId, at } });
    // Refused (a blocked token: the toast says why): nothing changed, the selection stays on
    // the step inspected (issue 45, B5); taken, the steps end at `at` and the selection follows.
    if (chipCount() !== at + 1) { MS.markSelected(); return; }
    followLast();
    const chip = $(`#tok-${at}`);
    if (session === ui.sessionId && chipCount() === at + 1 && chip && chip.dataset.tokenId === String(tokenId) && discarded.length) {
      ui.discarded = { at, session, steps: discarded };
      showDiscarded();
    }
  }

  // The count the force's question and its note both give: the tokens after the forced one.
  const dropped = (n) => `${n} token${n === 1 ? "" : "s"}`;

  // The note belongs to the session and the setup it was made in: a run, a step forward, a
  // reset, a new session or setup takes it away.
  function clearDiscarded() {
    ui.discarded = null;
    showDiscarded();
  }

  function showDiscarded() {
    const note = $("#discarded-note");
    if (!note) return;
    note.hidden = !ui.discarded;
    if (ui.discarded) note.textContent = `Forced at #${ui.discarded.at}: ${dropped(ui.discarded.steps.length - 1)} after it discarded. Undo (Backspace) restores them.`;
  }

  async function restoreDiscarded() {
    const { at, steps } = ui.discarded;
    clearDiscarded();
    await MS.request("action", "POST", MS.path("back", { session_id: ui.sessionId }), { target: "#tokens", swap: "beforeend" });
    let i = 0;
    while (i < steps.length) {
      if (steps[i].forced) {
        await MS.request("action", "POST", MS.path("force", { session_id: ui.sessionId }), { target: "#tokens", swap: "beforeend", values: { token_id: steps[i].token, at: at + i } });
        i++;
        continue;
      }
      let n = 0;
      while (i + n < steps.length && !steps[i + n].forced) n++;
      await MS.request("action", "POST", MS.path("step", { session_id: ui.sessionId }), { target: "#tokens", swap: "beforeend", values: { n } });
      i += n;
    }
    followLast();
  }

  function reset() {
    if (ui.running) stopRun();
    ui.sessionId = null;
    ui.dirty = true;
    ui.selected = null;
    ui.requestedIndex = null;
    clearDiscarded();
    $("#session-area").classList.remove("stale");
    $("#session-area").innerHTML = EMPTY_HINT;
    $("#prompt-rendered").innerHTML = "";
    MS.resetInspector();
    MS.drawTimeline();
    updateControls();
  }

  function setRunning(running) {
    ui.running = running;
    const button = $("#btn-run");
    button.textContent = running ? "❚❚ Pause" : "▶ Run";
    button.title = running ? "pause after the step in flight (space)" : "run until done, streaming (space)";
    document.body.classList.toggle("running", running);
    updateControls();
  }

  // A control that cannot act is disabled: Step and Run at the end of a run (until the setup
  // changes: then they start a new session), Undo with no step to undo, both during a run.
  // Step and Run also wait while no new session can start: the source does not compile (the
  // error's line is named, M6), or the model picked has no forward pass (a tokenizer-only
  // model: Replay, the Doctor and Code work on it, C10).
  function updateControls() {
    const fresh = Boolean(ui.sessionId) && !ui.dirty;
    const done = fresh && sessionDone();
    const why = fresh ? "" : cannotStart();
    $("#btn-step").disabled = ui.running || done || Boolean(why);
    $("#btn-run").disabled = (!ui.running && done) || (!ui.running && Boolean(why));
    $("#btn-back").disabled = ui.running || !fresh || chipCount() === 0;
    $("#controls").dataset.why = why;
    for (const id of ["#btn-step", "#btn-run"]) {
      const button = $(id);
      if (why) {
        if (button.dataset.title === undefined) button.dataset.title = button.title;
        button.title = why;
      } else if (button.dataset.title !== undefined) {
        button.title = button.dataset.title;
        delete button.dataset.title;
      }
    }
  }

  function cannotStart() {
    const picked = $("#model option:checked");
    if (picked && picked.dataset.kind === "tokenizer") {
      return `${picked.value} is a tokenizer-only model: it cannot generate (Replay, the Doctor and Code work on it)`;
    }
    const error = $("#compile-result[data-error-message]");
    if (!error) return "";
    const line = error.dataset.errorLine ? ` (line ${error.dataset.errorLine})` : "";
    return `the source does not compile${line}: ${error.dataset.errorMessage}`;
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
    const response = await fetch(MS.url(MS.path("sessionSteps", { session_id: ui.sessionId })));
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
    clearDiscarded();
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
  // A step of the run failed (its walk budget spent: grammar_too_slow): the stream says why in
  // `failed`, then ends. The steps before it stay; the message goes to the toast.
  function onRunFailed(event) {
    setRunning(false);
    let message = "the run stopped: a step failed";
    try {
      message = JSON.parse(event.data).error.message;
    } catch (_) { /* keep the plain message */ }
    toast(message);
  }
  // The end rules (min tokens, stop ids, stop) sit outside the form, beside max tokens: a change
  // of them is a new session's, as any change of setup.
  document.addEventListener("input", (event) => {
    if (event.target.closest && event.target.closest(".end-rule")) MS.configChanged(false);
  });
  document.addEventListener("htmx:sseOpen", (event) => {
    const source = event.detail.source;
    source.addEventListener("shutdown", () => onServerShutdown(source));
    source.addEventListener("failed", onRunFailed);
  });

  Object.assign(MS, { ensureSession, openPermalink, share, step, back, move, runOrPause, stopRun, runEnded,
                      force, reset, setRunning, updateCounter, updateControls, copyOutput,
                      onSessionEnded, showDiscarded, clearDiscarded });
})();
