// The page's layout: the wide panel under the editor and the output (Compile, Doctor, Tests) is
// resized by dragging its top edge, folded down to its tabs, or maximised over the editor and the
// output; its state is kept in localStorage. The timeline is redrawn whenever its width changes.
// Fast first use: the tokenizer's vocabulary is fetched once, in the background, after load, so
// that the first chip click, search or hover does not wait for it.
(() => {
  "use strict";
  const { $, ui } = MS;
  const KEY = "maskscope.layout";
  const MIN_HEIGHT = 80;
  // The editor and the output keep at least this much of the window above the panel.
  const KEEP_ABOVE = 430;

  function saved() {
    try { return JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (error) { return {}; }
  }
  function save(patch) {
    try { localStorage.setItem(KEY, JSON.stringify({ ...saved(), ...patch })); } catch (error) { /* private mode */ }
  }

  const defaultHeight = () => Math.round(Math.min(320, Math.max(120, window.innerHeight - 740)));

  function setHeight(px) {
    const height = Math.round(Math.max(MIN_HEIGHT, Math.min(window.innerHeight - KEEP_ABOVE, px)));
    $("#layout").style.setProperty("--dock-h", `${height}px`);
    return height;
  }

  function setCollapsed(collapsed) {
    $("#dock").classList.toggle("collapsed", collapsed);
    $("#btn-dock-collapse").setAttribute("aria-expanded", String(!collapsed));
    if (collapsed) setMaximised(false);
  }

  function setMaximised(maximised) {
    $("#layout").classList.toggle("dock-max", maximised);
    $("#btn-dock-max").setAttribute("aria-pressed", String(maximised));
    if (maximised) $("#dock").classList.remove("collapsed");
  }

  // A tab of the panel clicked while it is folded opens it.
  function openDock() {
    if ($("#dock").classList.contains("collapsed")) { setCollapsed(false); save({ collapsed: false }); }
  }

  function bindDrag() {
    const handle = $("#dock-handle");
    const dock = $("#dock");
    handle.addEventListener("pointerdown", (event) => {
      event.preventDefault();
      const startY = event.clientY;
      const start = dock.classList.contains("collapsed") ? MIN_HEIGHT : $(".dock-body", dock).getBoundingClientRect().height;
      setCollapsed(false);
      setMaximised(false);
      handle.setPointerCapture(event.pointerId);
      dock.classList.add("resizing");
      let height = start;
      const move = (e) => { height = setHeight(start + startY - e.clientY); };
      const up = () => {
        handle.removeEventListener("pointermove", move);
        dock.classList.remove("resizing");
        save({ height, collapsed: false });
      };
      handle.addEventListener("pointermove", move);
      handle.addEventListener("pointerup", up, { once: true });
      handle.addEventListener("pointercancel", up, { once: true });
    });
    handle.addEventListener("dblclick", () => { setHeight(defaultHeight()); save({ height: null }); });
  }

  // The vocabulary of the model picked, into the cache inspector.js's loadVocab reads (one
  // request per model, ever: a failed one is forgotten and asked again when needed).
  function prefetchVocab() {
    const picker = $("#model");
    const model = (picker && picker.value) || "local";
    if (ui.vocabs[model]) return;
    ui.vocabs[model] = fetch(MS.url(MS.path("vocab", {}, { model })))
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`no vocabulary for ${model}`))))
      .then((v) => v.tokens)
      .catch((error) => { delete ui.vocabs[model]; throw error; });
    ui.vocabs[model].catch(() => {});  // nobody waits for it yet
  }

  function bindLayout() {
    const state = saved();
    setHeight(state.height || defaultHeight());
    // A short window starts with the panel folded: the output and the timeline come first.
    setCollapsed(state.collapsed ?? window.innerHeight < 780);
    $("#btn-dock-collapse").addEventListener("click", () => {
      const collapsed = !$("#dock").classList.contains("collapsed");
      setCollapsed(collapsed);
      save({ collapsed });
    });
    $("#btn-dock-max").addEventListener("click", () => setMaximised(!$("#layout").classList.contains("dock-max")));
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && $("#layout").classList.contains("dock-max") && !document.querySelector("dialog[open]")) setMaximised(false);
    });
    bindDrag();
    window.addEventListener("resize", () => setHeight(saved().height || defaultHeight()));
    if (window.ResizeObserver && $("#timeline")) new ResizeObserver(() => MS.drawTimeline()).observe($("#timeline"));
    const picker = $("#model");
    if (picker) picker.addEventListener("change", prefetchVocab);
    const idle = window.requestIdleCallback || ((fn) => setTimeout(fn, 200));
    window.addEventListener("load", () => idle(prefetchVocab, { timeout: 1500 }));
  }

  // A permalink opened at the step shared (/s/{id}?step=36): the request that rebuilds the
  // session names it, and the server inspects that step; its chip is scrolled into view.
  document.addEventListener("htmx:configRequest", (event) => {
    const banner = $("#permalink-banner");
    if (banner && banner.dataset.step !== undefined && MS.isRoute(event.detail.path, "permalinkOpen")) {
      event.detail.parameters.step = banner.dataset.step;
    }
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    if (!MS.isRoute((event.detail.pathInfo || {}).requestPath, "permalinkOpen")) return;
    // after app.js's refresh (its frame marks the selected chip and scrolls to the end)
    requestAnimationFrame(() => setTimeout(() => {
      const chip = $("#tokens .chip.selected");
      if (chip) chip.scrollIntoView({ block: "nearest" });
    }, 0));
  });

  // A permalink's recorded chips: the step shared in view at once, before the live session.
  document.addEventListener("DOMContentLoaded", () => {
    const chip = $("#recorded-tokens .chip.selected");
    if (chip) chip.scrollIntoView({ block: "nearest" });
  });

  // Share: the link names the step selected (?step=), so that it reopens where it was shared.
  // Before session.js copies it: afterSwap runs inside the swap, before htmx.ajax resolves.
  document.addEventListener("htmx:afterSwap", (event) => {
    if (!event.detail.target || event.detail.target.id !== "share-result") return;
    const link = $("#share-result .share-link");
    if (!link || ui.selected === null) return;
    const url = new URL(link.dataset.url, window.location.href);
    url.searchParams.set("step", String(ui.selected));
    link.dataset.url = url.href;
    const input = $("input", link);
    if (input) input.value = url.href;
    const open = $("a", link);
    if (open) open.href = `${url.pathname}${url.search}`;
  });

  Object.assign(MS, { openDock, setDockMaximised: setMaximised, setDockCollapsed: setCollapsed });
  document.addEventListener("DOMContentLoaded", bindLayout);
})();
