// The app's routes the page's scripts call, in one place: no other file in static/ writes one.
// Each is an app path with its path parameters named as the app names them; every one is a
// route the app serves (tests/web/test_route_map.py). Paths stay unprefixed: MS.url() and the
// htmx:configRequest handler (core.js) put the root path before them, as for any app path.
(() => {
  "use strict";
  const ROUTES = Object.freeze({
    models: "/api/models",
    vocab: "/api/vocab",
    example: "/api/examples/{example_id}",
    toolFormats: "/api/tool-formats",
    serveFlags: "/api/serve-flags",
    sessionSteps: "/api/sessions/{session_id}",
    trace: "/api/sessions/{session_id}/trace",
    resume: "/api/sessions/{session_id}/resume",
    shadow: "/api/sessions/{session_id}/shadow",
    byPath: "/api/sessions/{session_id}/by-path",
    session: "/ui/sessions",
    step: "/ui/sessions/{session_id}/step",
    back: "/ui/sessions/{session_id}/back",
    force: "/ui/sessions/{session_id}/force",
    run: "/ui/sessions/{session_id}/run",
    pause: "/ui/sessions/{session_id}/pause",
    share: "/ui/sessions/{session_id}/share",
    inspect: "/ui/sessions/{session_id}/steps/{index}",
    permalinkOpen: "/ui/permalinks/{snapshot_id}/open",
    permalinkProgress: "/ui/permalinks/{snapshot_id}/progress",
    replay: "/ui/replay",
    replayStep: "/ui/replay/{index}",
    tests: "/ui/tests",
    export: "/ui/export",
  });
  const PARAM = /\{(\w+)\}/g;

  // The app path of route `name`, its parameters filled (and escaped) from `params`, with `query`
  // (an object) as its query string.
  function path(name, params = {}, query = null) {
    const template = ROUTES[name];
    if (template === undefined) throw new Error(`no route named ${name}`);
    const filled = template.replace(PARAM, (_, key) => {
      if (!(key in params)) throw new Error(`route ${name} needs ${key}`);
      return encodeURIComponent(String(params[key]));
    });
    return query ? `${filled}?${new URLSearchParams(query)}` : filled;
  }

  // Which route a request path (prefixed or not, a query string or not) is, and its parameters:
  // { name, params } or null.
  const MATCHERS = Object.entries(ROUTES).map(([name, template]) => {
    const keys = [...template.matchAll(PARAM)].map((m) => m[1]);
    const pattern = template.split(PARAM).map((part, i) => (i % 2 ? "([^/]+)" : part.replace(/[.*+?^$()|[\]\\]/g, "\\$&"))).join("");
    return { name, keys, regex: new RegExp(`^${pattern}$`) };
  });
  function routeOf(requestPath) {
    const bare = MS.appPath(String(requestPath || "").split("?")[0]);
    for (const { name, keys, regex } of MATCHERS) {
      const found = regex.exec(bare);
      if (found) return { name, params: Object.fromEntries(keys.map((key, i) => [key, decodeURIComponent(found[i + 1])])) };
    }
    return null;
  }
  const isRoute = (requestPath, name) => (routeOf(requestPath) || {}).name === name;

  Object.assign(MS, { path, routeOf, isRoute });
})();
