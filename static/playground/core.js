// Maskscope playground, shared core: the namespace every playground script adds to, the UI state,
// the toast, and the action queue. Scripts load in order (see templates/base.html): core, routes,
// editor, config, inspector, timeline, session, replay, keys, then app.js binds them to the page.
window.MS = (() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const ui = {
    sessionId: null, dirty: true, running: false, selected: null, follow: true,
    editor: null, kind: "json_schema", sources: {}, vocabs: {},
    inspectorBusy: false, inspectorWanted: null, compileDiagnostics: [], doctorDiagnostics: [],
    drawnInspector: null, discarded: null,
    // The setup (kind, source, options, engine, model) the page shows: a counter, bumped by each
    // change of it. Every request names it, and the session, and an answer for an older one is
    // dropped (app.js, htmx:beforeSwap). `replayRun` counts the Replay presses the same way.
    setup: 0, replayRun: 0, replayText: null, replayIds: null, replayLog: null, requestedIndex: null,
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

  // The page's CSRF token (app/web/middleware/security.py): htmx sends it on every request (app.js), and
  // so must every fetch() that changes state.
  const meta = (name) => (document.querySelector(`meta[name="${name}"]`) || { content: "" }).content;
  const csrfHeaders = () => ({ "X-CSRF-Token": meta("csrf-token"), ...scopeHeaders() });

  // What a request to `path` belongs to, taken when it is sent: its answer is dropped when that
  // is no longer what the page shows (a newer setup, another session, a newer replay).
  function scopeOf(path) {
    const route = MS.routeOf(path) || { name: null, params: {} };
    if (route.params.session_id !== undefined) return { session: route.params.session_id };
    if (route.name === "replay") return { setup: ui.setup, replay: ++ui.replayRun };
    if (route.name === "replayStep") return { setup: ui.setup, replay: ui.replayRun };
    return { setup: ui.setup };
  }

  function isStale(scope) {
    if (!scope) return false;
    if (scope.session !== undefined) return scope.session !== ui.sessionId;
    if (scope.replay !== undefined && scope.replay !== ui.replayRun) return true;
    return scope.setup !== ui.setup;
  }

  // The headers that name the session and the setup, on every request the page makes.
  const scopeHeaders = () => ({ "X-Maskscope-Setup": String(ui.setup), "X-Maskscope-Session": ui.sessionId || "" });

  // One hidden source element per kind of request: htmx queues a request behind another one from
  // the same element and resolves its promise at once (and its "last" queue drops the one queued
  // before), so requests of unrelated kinds must never share one (a new session queued behind
  // the Tests' request was read before it was swapped in: issue 26, problem 1).
  function sourceFor(kind) {
    let box = document.getElementById("ms-requests");
    if (!box) {
      box = document.createElement("div");
      box.id = "ms-requests";
      box.hidden = true;
      document.body.appendChild(box);
    }
    let source = box.querySelector(`[data-kind="${kind}"]`);
    if (!source) {
      source = document.createElement("span");
      source.dataset.kind = kind;
      box.appendChild(source);
    }
    return source;
  }

  // The setup form's values (the fields outside it that name it with form="config" included).
  const formValues = () => Object.fromEntries(new FormData(document.getElementById("config")));

  // htmx.ajax from the kind's own source; `form` adds the setup form's values under `values`.
  function request(kind, verb, path, { target, swap = "innerHTML", values = {}, form = false } = {}) {
    const all = form ? { ...formValues(), ...values } : values;
    return htmx.ajax(verb, path, { source: sourceFor(kind), target, swap, values: all });
  }

  // The path the server is served under behind a proxy ("" at /, else "/maskscope": see
  // app/web/middleware/rootpath.py). url() puts it before an app path, for fetch() and links; every htmx
  // request path starting with "/" gets it here, once, so an hx-post path stays as written.
  const rootPath = meta("root-path");
  const url = (path) => (rootPath && path.startsWith("/") && !path.startsWith(`${rootPath}/`) ? rootPath + path : path);
  document.addEventListener("htmx:configRequest", (event) => { event.detail.path = url(event.detail.path); });
  // The app path of a (prefixed) request path: what scopeOf and app.js compare.
  const appPath = (path) => (rootPath && path.startsWith(`${rootPath}/`) ? path.slice(rootPath.length) : path);

  const isAllowed = (words, id) => ((words[id >>> 5] >>> (id & 31)) & 1) === 1;
  const visible = (text) => (text === "" ? "∅" : text.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "⇥"));

  return { $, $$, ui, toast, enqueue, isAllowed, visible, meta, csrfHeaders, scopeOf, isStale,
           scopeHeaders, request, formValues, url, appPath };
})();
