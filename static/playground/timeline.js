// The timeline under the output: depth, allowed tokens (log) and probability removed per step;
// for a structural tag, its segments as bands behind them, and the unmasked steps (the
// reasoning, under mask_after_end) as a slate strip along the top. The class strip
// (classes.js) has its own lane along the bottom, as tall as MS.classLane says; an empty mask
// (vLLM aborts the request there) is a full-height black mark, a token that straddles the
// reasoning's end a violet notch on top.
(() => {
  "use strict";
  const { $, $$, ui } = MS;

  function drawTimeline() {
    const canvas = $("#timeline");
    if (!canvas) return;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    const scale = window.devicePixelRatio || 1;
    canvas.width = width * scale;
    canvas.height = height * scale;
    const ctx = canvas.getContext("2d");
    ctx.scale(scale, scale);
    ctx.clearRect(0, 0, width, height);
    const chips = $$("#tokens .chip");
    if (!chips.length) { drawFlags(ctx, [], 1, height, canvas); return; }
    const n = Math.max(chips.length, 32);
    const w = width / n;
    const data = chips.map((c) => ({ depth: Number(c.dataset.depth), allowed: Number(c.dataset.allowed),
                                     blocked: Number(c.dataset.blocked), vocab: Number(c.dataset.vocab),
                                     disagree: c.dataset.agree === "false",
                                     rollback: c.dataset.rollback === "differs",
                                     empty: c.dataset.emptyMask === "true", straddle: c.dataset.straddle !== undefined }));
    drawSegments(ctx, chips, w, height, canvas);
    // the lines and bars stand above the class strip's lane, never over it
    const plot = height - (MS.classLane ? MS.classLane(height) : 0);
    const maxDepth = Math.max(1, ...data.map((d) => d.depth));
    const logVocab = Math.log10(data[0].vocab || 49152);
    ctx.fillStyle = "rgba(225, 29, 72, 0.45)";
    data.forEach((d, i) => { const h = d.blocked * (plot - 4); ctx.fillRect(i * w, plot - h, Math.max(w - 0.5, 0.5), h); });
    line(ctx, data, w, "#0d9488", 1.5, (d) => plot - 2 - (Math.log10(Math.max(d.allowed, 1)) / logVocab) * (plot - 6));
    line(ctx, data, w, "#4f46e5", 2, (d) => plot - 2 - (d.depth / maxDepth) * (plot - 10));
    // Steps where the mask and accept_token disagreed: a full-height amber mark.
    ctx.fillStyle = "rgba(180, 83, 9, 0.85)";
    data.forEach((d, i) => { if (d.disagree) ctx.fillRect(i * w, 0, Math.max(w - 0.5, 2), height); });
    // Steps after a rollback that did not restore the matcher: a full-height crimson mark.
    ctx.fillStyle = "rgba(159, 18, 57, 0.9)";
    data.forEach((d, i) => { if (d.rollback) ctx.fillRect(i * w, 0, Math.max(w - 0.5, 2), height); });
    drawFlags(ctx, data, w, height, canvas);
    (window.maskscopeTimelineHooks || []).forEach((hook) => hook(ctx, chips, w, height));
    if (ui.selected !== null && ui.selected < data.length) {
      ctx.fillStyle = "rgba(30, 27, 75, 0.18)";
      ctx.fillRect(ui.selected * w, 0, Math.max(w, 2), height);
    }
    canvas.onclick = (event) => {
      const rect = canvas.getBoundingClientRect();
      const index = Math.floor(((event.clientX - rect.left) / rect.width) * n);
      if (index >= 0 && index < data.length) MS.select(index);
    };
  }

  const BANDS = {
    reasoning: "rgba(148, 163, 184, 0.28)", tag_begin: "rgba(245, 158, 11, 0.25)",
    tool_name: "rgba(234, 88, 12, 0.32)", arguments: "rgba(16, 185, 129, 0.2)",
    tag_end: "rgba(245, 158, 11, 0.25)",
  };
  const UNMASKED = "rgb(71, 85, 105)";

  // An empty mask (vLLM aborts the request at that step): a full-height black mark; a token that
  // straddles the reasoning's end: a violet notch along the top. The steps are written on the
  // canvas (data-empty-masks, data-straddles) for tests and tools, and each legend entry shows
  // only while the timeline has one.
  function drawFlags(ctx, data, w, height, canvas) {
    const empty = [], straddles = [];
    data.forEach((d, i) => {
      if (d.empty) {
        empty.push(i);
        ctx.fillStyle = "rgba(15, 23, 42, 0.9)";
        ctx.fillRect(i * w, 0, Math.max(w - 0.5, 3), height);
      }
      if (d.straddle) {
        straddles.push(i);
        ctx.fillStyle = "rgb(124, 58, 237)";
        ctx.beginPath();
        ctx.moveTo(i * w, 0); ctx.lineTo((i + 1) * w, 0); ctx.lineTo((i + 0.5) * w, 10);
        ctx.closePath(); ctx.fill();
      }
    });
    canvas.dataset.emptyMasks = empty.join(",");
    canvas.dataset.straddles = straddles.join(",");
    const legend = (name) => document.querySelector(`.timeline-legend .${name}`);
    if (legend("flag-empty")) legend("flag-empty").hidden = !empty.length;
    if (legend("flag-straddle")) legend("flag-straddle").hidden = !straddles.length;
  }

  // Runs of equal segments become bands; the runs are also written on the canvas
  // (data-segments "kind:first-last,...", data-unmasked the count) for tests and tools.
  function drawSegments(ctx, chips, w, height, canvas) {
    const runs = [];
    chips.forEach((c, i) => {
      const kind = c.dataset.segment || "";
      const last = runs[runs.length - 1];
      if (last && last.kind === kind) last.end = i; else runs.push({ kind, start: i, end: i });
    });
    runs.forEach((r) => {
      if (!BANDS[r.kind]) return;
      ctx.fillStyle = BANDS[r.kind];
      ctx.fillRect(r.start * w, 0, (r.end - r.start + 1) * w, height);
    });
    ctx.fillStyle = UNMASKED;
    let unmasked = 0;
    chips.forEach((c, i) => {
      if (c.dataset.masked !== "false") return;
      unmasked += 1;
      ctx.fillRect(i * w, 3, Math.max(w - 0.5, 1), 5);
    });
    const tagged = runs.filter((r) => r.kind);
    canvas.dataset.segments = tagged.map((r) => `${r.kind}:${r.start}-${r.end}`).join(",");
    canvas.dataset.unmasked = String(unmasked);
    const legend = document.querySelector(".timeline-legend .segments");
    if (legend) legend.hidden = !tagged.length && !unmasked;
  }

  function line(ctx, data, w, color, width, y) {
    ctx.strokeStyle = color; ctx.lineWidth = width; ctx.beginPath();
    data.forEach((d, i) => {
      if (i === 0) ctx.moveTo(0, y(d)); else ctx.lineTo(i * w, y(d));
      ctx.lineTo((i + 1) * w, y(d));
    });
    ctx.stroke();
  }

  Object.assign(MS, { drawTimeline });
})();
