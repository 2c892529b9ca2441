// Keyboard shortcuts, the same on every tab: ← → move the selection (on Generate, → past the
// last step takes a new one; on Replay, through the replayed tokens), Backspace undoes the last
// step, space runs or pauses. They work everywhere but in text fields; presses queue while an
// action is in flight.
(() => {
  "use strict";
  const { enqueue } = MS;
  const TEXT_FIELDS = "textarea, select, [contenteditable='true'], .cm-editor, input:not([type=checkbox]):not([type=radio]):not([type=button])";
  const KEYS = ["ArrowRight", "ArrowLeft", " ", "Backspace"];

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest(TEXT_FIELDS)) return;
    if (dialogOpen()) return;
    const key = event.key;
    if (!KEYS.includes(key)) return;
    event.preventDefault();  // no button press, no radio change, no scroll, no history back
    const delta = key === "ArrowRight" ? 1 : key === "ArrowLeft" ? -1 : 0;
    if (MS.replayMode()) {
      if (delta) enqueue(() => MS.moveReplay(delta));
      return;
    }
    if (delta) enqueue(() => MS.move(delta));
    else if (key === "Backspace") enqueue(MS.back);
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
