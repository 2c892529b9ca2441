// The timeline's class strip: one row per class of tokens the records count (the legend's
// `.classes` entries, in the order of the chips' data-classes counts: the records' `classes`,
// counted as the inspector counts its blocked classes), along the bottom of the canvas. A cell's
// opacity is the class's share of the step's allowed tokens: a full cell, nothing else was
// allowed. A run of steps that allowed only whitespace or only digits is a default alarm
// (the records' `alarms`), which breaks.js marks: one mark, not two.
(() => {
  "use strict";

  // [{key, color}] from the legend, whose swatches carry the rows' colours (app.css)
  function classRows() {
    return [...document.querySelectorAll(".timeline-legend .classes [data-class]")].map((entry) => {
      const swatch = entry.querySelector(".sw");
      const color = swatch ? getComputedStyle(swatch).backgroundColor : "rgb(100, 116, 139)";
      return { key: entry.dataset.class, color };
    });
  }

  // the height of one row on a canvas this tall: the strip takes about a fifth of it
  function rowHeight(height, rows) {
    return Math.max(1, Math.min(3, Math.floor((height * 0.22) / Math.max(rows, 1))));
  }

  // the strip's lane, and a 2 px gap above it: timeline.js draws its lines above
  function classLane(height) {
    const rows = classRows().length;
    return rows ? rows * rowHeight(height, rows) + 2 : 0;
  }

  function drawClasses(ctx, chips, w, height) {
    const rows = classRows();
    const row = rowHeight(height, rows.length);
    const top = height - rows.length * row;
    const strip = [];
    chips.forEach((chip, i) => {
      if (chip.dataset.classes === undefined) return;
      const allowed = Number(chip.dataset.allowed);
      const counts = chip.dataset.classes.split("/").map(Number);
      const shares = rows.map((_, r) => (allowed > 0 && Number.isFinite(counts[r]) ? Math.min(counts[r] / allowed, 1) : 0));
      shares.forEach((share, r) => {
        if (share <= 0) return;
        ctx.globalAlpha = 0.2 + 0.8 * share;
        ctx.fillStyle = rows[r].color;
        ctx.fillRect(i * w, top + r * row, Math.max(w - 0.5, 0.5), row);
      });
      ctx.globalAlpha = 1;
      strip.push(`${i}:${shares.map((s) => s.toFixed(3)).join("/")}`);
    });
    // what was drawn, for tests and tools: "step:share/share/..." in the rows' order
    if (ctx.canvas) {
      ctx.canvas.dataset.classes = strip.join(",");
      ctx.canvas.dataset.classKeys = rows.map((r) => r.key).join(",");
    }
  }

  MS.classLane = classLane;
  (window.maskscopeTimelineHooks = window.maskscopeTimelineHooks || []).push(drawClasses);
})();
