// The timeline's class strip: for each step, the share of its allowed tokens that start with
// whitespace (blue) and that are digits only (orange), read from the chips' data-class-*
// attributes (the records' `classes`). A step whose allowed tokens are all whitespace or all
// digits fills its column: a run of them is the "whitespace only / digits only" alarm, which
// breaks.js marks (one mark, not two).
(() => {
  "use strict";
  const STRIP = 8;

  function share(chip, name) {
    const allowed = Number(chip.dataset.allowed);
    const count = Number(chip.dataset[name]);
    return allowed > 0 && Number.isFinite(count) ? Math.min(count / allowed, 1) : 0;
  }

  function drawClasses(ctx, chips, w, height) {
    const strip = [];
    chips.forEach((chip, i) => {
      if (chip.dataset.classLead === undefined) return;
      const lead = share(chip, "classLead");
      const digits = share(chip, "classDigits");
      strip.push(`${i}:${lead.toFixed(3)}/${digits.toFixed(3)}`);
      ctx.fillStyle = "rgba(37, 99, 235, 0.8)";
      ctx.fillRect(i * w, height - STRIP * lead, Math.max(w - 0.5, 0.5), STRIP * lead);
      ctx.fillStyle = "rgba(234, 88, 12, 0.8)";
      ctx.fillRect(i * w, height - STRIP * digits, Math.max(w - 0.5, 0.5), STRIP * digits);
    });
    // what was drawn, for tests and tools: "step:whitespace-leading/digits" shares
    if (ctx.canvas) ctx.canvas.dataset.classes = strip.join(",");
  }

  (window.maskscopeTimelineHooks = window.maskscopeTimelineHooks || []).push(drawClasses);
})();
