// Maskscope: the engine picker and compare mode (loaded after app.js, which it only hooks).
(function () {
  "use strict";
  const form = document.getElementById("config");
  if (!form || !form.engine) return;

  // With llguidance a preset means what that stack passes to llguidance (vLLM's guidance
  // backend leaves additionalProperties open): app.js applied xgrammar's; this runs after it.
  function applyLlguidancePreset() {
    if (form.engine.value !== "llguidance") return;
    const presets = JSON.parse(document.getElementById("llguidance-presets").textContent);
    const opts = presets[form.preset.value];
    if (!opts) return;
    form.any_whitespace.checked = opts.any_whitespace;
    form.strict_mode.checked = opts.strict_mode;
  }
  form.addEventListener("change", (event) => {
    // after app.js has applied xgrammar's preset (its listener may be bound after this one)
    if (event.target.name === "preset" || event.target.name === "engine") setTimeout(applyLlguidancePreset, 0);
  });

  // The timeline: a violet mark at the first step where the follower diverged, a dark one
  // where it ended (refused the driver's token).
  window.maskscopeTimelineHooks = window.maskscopeTimelineHooks || [];
  window.maskscopeTimelineHooks.push((ctx, chips, w, height) => {
    const first = chips.findIndex((c) => c.dataset.diverged === "true");
    if (first >= 0) {
      ctx.fillStyle = "rgba(124, 58, 237, 0.9)";
      ctx.fillRect(first * w, 0, Math.max(w - 0.5, 3), height);
    }
    const ended = chips.findIndex((c) => c.dataset.followerEnded === "true");
    if (ended >= 0) {
      ctx.fillStyle = "rgba(30, 27, 75, 0.9)";
      ctx.fillRect(ended * w, height - 6, Math.max(w - 0.5, 3), 6);
    }
    const timeline = document.getElementById("timeline");
    if (timeline) timeline.dataset.firstDivergence = first >= 0 ? String(first) : "";
  });
})();
