// Maskscope playground, shared core: the namespace every playground script adds to, the UI state,
// the toast, and the action queue. Scripts load in order (see templates/base.html): core, editor,
// config, inspector, timeline, session, replay, keys, then app.js binds them to the page.
window.MS = (() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const ui = {
    sessionId: null, dirty: true, running: false, selected: null, follow: true,
    editor: null, kind: "json_schema", sources: {}, vocabs: {},
    inspectorBusy: false, inspectorWanted: null, compileDiagnostics: [], doctorDiagnostics: [],
    drawnInspector: null, discarded: null,
  };

  function toast(text) {
    const box = $("#toast");
    box.innerHTML = "";
    const body = document.createElement("div");
    body.className = "toast-body";
    body.textContent = text;
    box.appendChild(body);
  }

  // Actions (steps, back, run, force...) run one after another: a key pressed while a step is in
  // flight waits its turn instead of being dropped. The cap only guards against a held-down key.
  const QUEUE_MAX = 64;
  let chain = Promise.resolve();
  let pending = 0;
  function enqueue(action) {
    if (pending >= QUEUE_MAX) {
      toast(`${QUEUE_MAX} actions are already waiting: this one is dropped`);
      return chain;
    }
    pending++;
    chain = chain.then(action).catch((error) => console.error(error)).finally(() => { pending--; });
    return chain;
  }

  // The page's CSRF token (app/web/security.py): htmx sends it on every request (app.js), and
  // so must every fetch() that changes state.
  const meta = (name) => (document.querySelector(`meta[name="${name}"]`) || { content: "" }).content;
  const csrfHeaders = () => ({ "X-CSRF-Token": meta("csrf-token") });

  // The path the server is served under behind a proxy ("" at /, else "/maskscope": see
  // app/web/rootpath.py). url() puts it before an app path, for fetch() and links; every htmx
  // request path starting with "/" gets it here, once, so hx-post="/ui/..." stays as written.
  const rootPath = meta("root-path");
  const url = (path) => (rootPath && path.startsWith("/") && !path.startsWith(`${rootPath}/`) ? rootPath + path : path);
  document.addEventListener("htmx:configRequest", (event) => { event.detail.path = url(event.detail.path); });

  const isAllowed = (words, id) => ((words[id >>> 5] >>> (id & 31)) & 1) === 1;
  const visible = (text) => (text === "" ? "∅" : text.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "⇥"));

  return { $, $$, ui, toast, enqueue, isAllowed, visible, meta, csrfHeaders, url };
})();
