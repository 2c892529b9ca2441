// The replay's inputs belong to the setup they were written for (issue 45, C8): each setup (the
// source kind, the preset, the example) keeps its own text, ids and log line. Switching to another
// setup keeps what it wrote there, and switching back restores them; a setup never visited
// starts from what the boxes hold. Every change of setup ends in a compile (config.js), so the
// compile event is where the setup is read: an example's kind is set only once it has loaded.
(() => {
  "use strict";
  const { $ } = MS;
  const FIELDS = ["#replay-text", "#replay-ids", "#replay-log"];
  const saved = new Map();
  let current = null;

  function setupKey() {
    const kind = ($('input[name="kind"]:checked') || { value: "" }).value;
    const preset = ($("#preset") || { value: "" }).value;
    const example = ($("#example") || { value: "" }).value;
    return JSON.stringify([kind, preset, example]);
  }

  const values = () => FIELDS.map((sel) => ($(sel) ? $(sel).value : ""));

  function restore(kept) {
    FIELDS.forEach((sel, i) => { if ($(sel)) $(sel).value = kept[i]; });
  }

  // The setup may have changed: what the boxes hold goes to the old one, the new one's comes back.
  function setupSwitched() {
    const key = setupKey();
    if (key === current) return;
    if (current !== null) saved.set(current, values());
    if (saved.has(key)) restore(saved.get(key));
    current = key;
  }

  function bindReplayTexts() {
    current = setupKey();
    document.body.addEventListener("compile", setupSwitched);
  }

  Object.assign(MS, { setupSwitched, bindReplayTexts });
  document.addEventListener("DOMContentLoaded", bindReplayTexts);
})();
