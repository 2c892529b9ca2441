// Keyboard shortcuts: → step, ← back, space run/pause (on Replay: ← → move through the replayed
// tokens). They work everywhere but in text fields; presses queue while an action is in flight.
(() => {
  "use strict";
  const { enqueue } = MS;
  const TEXT_FIELDS = "textarea, select, [contenteditable='true'], .cm-editor, input:not([type=checkbox]):not([type=radio]):not([type=button])";

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest(TEXT_FIELDS)) return;
    if (dialogOpen()) return;
    const key = event.key;
    if (key !== "ArrowRight" && key !== "ArrowLeft" && key !== " ") return;
    event.preventDefault();  // no button press, no radio change, no scroll
    if (MS.replayMode()) {
      if (key === "ArrowRight") enqueue(() => MS.moveReplay(1));
      else if (key === "ArrowLeft") enqueue(() => MS.moveReplay(-1));
      return;
    }
    if (key === "ArrowRight") enqueue(() => MS.step());
    else if (key === "ArrowLeft") enqueue(MS.back);
    else enqueue(MS.runOrPause);
  }

  function dialogOpen() { return Boolean(document.querySelector("dialog[open]")); }

  function bindKeys() {
    document.addEventListener("keydown", onKey);
    // A button clicked with the mouse keeps the focus: space would press it again.
    document.addEventListener("keyup", (event) => {
      if (event.key === " " && event.target.tagName === "BUTTON" && !event.target.closest("dialog")) event.preventDefault();
    });
  }

  Object.assign(MS, { bindKeys });
})();
