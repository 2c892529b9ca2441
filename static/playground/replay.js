// The Replay tab: switching to it, opening a replayed token in the inspector, moving through the
// replayed tokens with the arrow keys, and marking the schema line a refusal names.
(() => {
  "use strict";
  const { $, $$, ui } = MS;

  const replayMode = () => ($('input[name="mode"]:checked') || { value: "generate" }).value === "replay";

  function setMode(replay) {
    $(".generate-view").hidden = replay;
    $(".replay-view").hidden = !replay;
    $("#controls").classList.toggle("inactive", replay);
  }

  function selectReplayToken(index) {
    const chips = $$("#replay-result .chip");
    if (!chips.length) return Promise.resolve();
    const chip = chips[Math.max(0, Math.min(index, chips.length - 1))];
    chips.forEach((c) => c.classList.toggle("selected", c === chip));
    chip.scrollIntoView({ block: "nearest" });
    // The text of the replay shown, not what the box holds now (it may have been edited since).
    const values = { text: ui.replayText ?? $("#replay-text").value,
      token_ids: ui.replayIds ?? $("#replay-ids").value, log: ui.replayLog ?? $("#replay-log").value };
    return MS.request("replay-inspector", "POST", MS.path("replayStep", { index: chip.dataset.index }), { target: "#inspector", swap: "outerHTML", values, form: true });
  }

  function moveReplay(delta) {
    const chips = $$("#replay-result .chip");
    if (!chips.length) return Promise.resolve();
    const current = chips.findIndex((c) => c.classList.contains("selected"));
    const next = current < 0 ? (delta > 0 ? 0 : chips.length - 1) : current + delta;
    if (next < 0 || next >= chips.length) return Promise.resolve();
    return selectReplayToken(next);
  }

  // After a replay: the refused character scrolled into view, the schema line at fault marked,
  // and the inspector on the refused token, as a test's click opens it (issue 45, C16): never
  // a Generate step or a token of the previous replay beside this refusal (B4, issue 26's 3).
  function onReplayResult() {
    const result = $("#replay-result");
    if (!result) return;
    MS.resetInspector();
    const refused = $(".chip.refused", result);
    if (refused) selectReplayToken(Number(refused.dataset.index));
    const mark = $("mark", result);
    if (mark) mark.scrollIntoView({ block: "nearest", inline: "center" });
    const line = Number(result.dataset.schemaLine || 0);
    MS.markReplayLine(line, result.dataset.cause || "");
  }

  // A Doctor finding's example, clicked: replayed in the Replay tab, in view (a maximised
  // panel is restored, issue 45, C6).
  function openReplay(text) {
    MS.setDockMaximised(false);
    const radio = $('input[name="mode"][value="replay"]');
    if (radio) radio.checked = true;
    setMode(true);
    $("#replay-text").value = text;
    $("#btn-replay").click();
  }

  function bindReplay() {
    document.addEventListener("click", (event) => {
      const example = event.target.closest("[data-replay-text]");
      if (example) openReplay(example.dataset.replayText);
    });
    $$('input[name="mode"]').forEach((radio) => radio.addEventListener("change", () => {
      setMode(replayMode());
      radio.blur();
      // Back on Generate: the inspector shows the step selected there, not a replayed token.
      const inspector = $("#inspector");
      if (!replayMode() && inspector && inspector.dataset.replay) {
        MS.resetInspector();
        if (ui.selected !== null) MS.inspect(ui.selected);
      }
    }));
  }

  // A change of setup: the replay shown judged the old grammar.
  function dropReplay() {
    const result = $("#replay-result");
    if (result && result.children.length) {
      result.outerHTML = '<div id="replay-result"><p class="muted">The setup changed: press Replay to check the text against it.</p></div>';
    }
    const inspector = $("#inspector");
    if (inspector && inspector.dataset.replay) MS.resetInspector();
  }

  Object.assign(MS, { replayMode, selectReplayToken, moveReplay, onReplayResult, bindReplay, openReplay, dropReplay });
})();
