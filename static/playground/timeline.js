// The timeline under the output: depth, allowed tokens (log) and probability removed per step.
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
    if (!chips.length) return;
    const n = Math.max(chips.length, 32);
    const w = width / n;
    const data = chips.map((c) => ({ depth: Number(c.dataset.depth), allowed: Number(c.dataset.allowed),
                                     blocked: Number(c.dataset.blocked), vocab: Number(c.dataset.vocab),
                                     disagree: c.dataset.agree === "false",
                                     rollback: c.dataset.rollback === "differs" }));
    const maxDepth = Math.max(1, ...data.map((d) => d.depth));
    const logVocab = Math.log10(data[0].vocab || 49152);
    ctx.fillStyle = "rgba(225, 29, 72, 0.45)";
    data.forEach((d, i) => { const h = d.blocked * (height - 4); ctx.fillRect(i * w, height - h, Math.max(w - 0.5, 0.5), h); });
    line(ctx, data, w, "#0d9488", 1.5, (d) => height - 2 - (Math.log10(Math.max(d.allowed, 1)) / logVocab) * (height - 6));
    line(ctx, data, w, "#4f46e5", 2, (d) => height - 2 - (d.depth / maxDepth) * (height - 10));
    // Steps where the mask and accept_token disagreed: a full-height amber mark.
    ctx.fillStyle = "rgba(180, 83, 9, 0.85)";
    data.forEach((d, i) => { if (d.disagree) ctx.fillRect(i * w, 0, Math.max(w - 0.5, 2), height); });
    // Steps after a rollback that did not restore the matcher: a full-height crimson mark.
    ctx.fillStyle = "rgba(159, 18, 57, 0.9)";
    data.forEach((d, i) => { if (d.rollback) ctx.fillRect(i * w, 0, Math.max(w - 0.5, 2), height); });
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
