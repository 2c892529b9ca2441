// The Tools tab: its controls (builder, format, tool_choice, reasoning, parallel calls, each
// tool's strict, and the vLLM serve flags reasoning_parser, strict_level and strict calling) edit
// the tools source's fields; the formats come from the tool-formats route and the serve flags'
// values from the serve-flags route (vLLM's own registries), and the compile panel's tag opens as
// a structural_tag source. The options a tag does not carry are disabled (issue 45, C12).
(() => {
  "use strict";
  const { $, $$, ui } = MS;
  let formats = [];
  let flags = null;  // the serve-flags route's answer: the serve flags' fields and their values
  let flagsAsked = false;
  let builderNote = "";  // what the last builder switch did to the format

  function parsed() {
    try {
      const data = JSON.parse(MS.source());
      return data && typeof data === "object" && !Array.isArray(data) ? data : null;
    } catch (error) { return null; }
  }

  function option(value, text, { disabled = false, title = "" } = {}) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    o.disabled = disabled;
    if (title) o.title = title;
    return o;
  }

  // The format picker lists the chosen builder's formats; an unavailable one is disabled and
  // says why (a builder that cannot list any is one row with an empty name).
  function fillFormats(builder, current) {
    const picker = $("#tools-format");
    const rows = formats.filter((f) => f.builder === builder);
    picker.replaceChildren(...rows.filter((f) => f.name).map((f) => option(f.name, f.name, {
      disabled: !f.available, title: f.available ? (f.reasoning_end ? `reasoning ends at ${f.reasoning_end}` : "") : f.reason,
    })));
    const down = rows.find((f) => !f.name);
    if (down) picker.append(option("", `unavailable: ${down.reason}`, { disabled: true }));
    if (current && !rows.some((f) => f.name === current)) picker.append(option(current, `${current} (unknown)`));
    picker.value = current || "";
    const vllm = formats.filter((f) => f.builder === "vllm");
    const builderOption = $('#tools-builder option[value="vllm"]');
    const usable = vllm.some((f) => f.available);
    builderOption.title = usable ? "" : `unavailable: ${(vllm[0] || {}).reason || "not listed"}`;
    builderOption.disabled = !usable && builder !== "vllm";  // a source naming it still shows it
  }

  function fillChoices(data) {
    const picker = $("#tools-choice");
    const names = (Array.isArray(data.tools) ? data.tools : [])
      .map((t) => t && t.function && t.function.name).filter((n) => typeof n === "string");
    picker.replaceChildren(...["none", "auto", "required"].map((v) => option(v, v)),
      ...names.map((n) => option(`function:${n}`, `function ${n}`)));
    const choice = data.tool_choice ?? "auto";
    picker.value = typeof choice === "string" ? choice : `function:${(choice.function || {}).name}`;
  }

  // mask_after_end waits for the reasoning's end marker: a tools build with none can never
  // start masking, so the combination is flagged beside the select (issue 45, C11).
  // The fix depends on the builder: vLLM's ends the reasoning where the server's
  // --reasoning-parser does (xgrammar's reasoning setting changes nothing there).
  function flagReasoning() {
    const flag = $("#reasoning-flag");
    const built = $("#compile-result .stats") && $("#compile-result #tag-text");
    const ends = /reasoning ends at/.test(($("#compile-result") || { textContent: "" }).textContent);
    const impossible = ui.kind === "tools" && $("#reasoning").value === "mask_after_end" && built && !ends;
    const vllm = (parsed() || {}).builder === "vllm";
    const fix = vllm ? "set reasoning_parser (the server's --reasoning-parser) to the model's reasoning parser"
      : "set the builder's reasoning to enabled";
    flag.textContent = impossible ? `⚠ this tag has no reasoning end marker: ${fix}, or pick none` : "";
  }

  // The serve flags' pickers: their values from the server (none listed until vLLM's code has
  // started); the xgrammar builder takes none of them (disabled, saying so).
  function fillFlags(data) {
    const vllm = data.builder === "vllm";
    const fields = Object.fromEntries(((flags || {}).fields || []).map((f) => [f.field, f]));
    const ends = Object.fromEntries(((flags || {}).reasoning_parsers || []).map((p) => [p.name, p]));
    const why = !vllm ? "the xgrammar builder has no parameter for it: a vLLM serve flag, not carried"
      : flags && !flags.available ? `unavailable: ${flags.reason}` : "";
    $$("#tools-serve-flags select").forEach((picker) => {
      const field = fields[picker.dataset.field];
      const current = data[picker.dataset.field];
      const value = current === undefined || current === null ? "" : String(current);
      const unset = picker.options[0];
      const rows = ((field || {}).values || []).map((v) => {
        const parser = ends[v];
        const title = parser ? (parser.reasoning_end ? `its reasoning ends at ${parser.reasoning_end}` : parser.reason || "") : "";
        return option(String(v), v === true ? "on" : v === false ? "off" : String(v), { title });
      });
      picker.replaceChildren(unset, ...rows);
      if (value && !rows.some((o) => o.value === value)) picker.append(option(value, `${value} (unknown)`));
      picker.value = value;
      picker.disabled = !vllm;
      picker.closest("label").title = why || (field ? `vLLM's ${field.flag} (a request source's serve.${field.serve})` : "");
    });
  }

  // Each tool's strict, one box a tool.
  function fillStrict(data) {
    const box = $("#tools-strict");
    const tools = (Array.isArray(data.tools) ? data.tools : []).filter((t) => t && t.function && typeof t.function.name === "string");
    box.replaceChildren(box.firstElementChild, ...tools.map((t) => {
      const label = document.createElement("label");
      label.className = "check";
      const input = document.createElement("input");
      input.type = "checkbox";
      input.dataset.tool = t.function.name;
      input.checked = t.function.strict === true;
      label.append(input, ` ${t.function.name}`);
      return label;
    }));
  }

  async function loadFlags() {
    flagsAsked = true;
    const model = ($("#model") || { value: "" }).value;
    try {
      let response = await fetch(MS.url(MS.path("serveFlags", {}, { model })));
      if (!response.ok) response = await fetch(MS.url(MS.path("serveFlags")));  // a model loading
      if (response.ok) flags = await response.json();
    } catch (error) { /* the server is away: the pickers stay as the source says */ }
    sync();
    if (!flags || (!flags.available && /starting/.test(flags.reason || ""))) setTimeout(loadFlags, 3000);
  }

  // The options a tag does not carry (the compile answer's not_carried), disabled with the reason;
  // enabled again for the kinds that take them.
  function markNotCarried() {
    const stats = $("#compile-result .stats");
    const tag = ui.kind === "tools" || ui.kind === "structural_tag";
    const listed = tag && stats && stats.dataset.notCarried !== undefined
      ? stats.dataset.notCarried.split(" ").filter(Boolean) : null;
    if (listed === null && tag) return;  // not compiled yet: left as they are
    const names = new Set(listed || []);
    const fields = { preset: ["preset"], separators: ["sep_item", "sep_key"] };
    const off = new Set([...names].flatMap((n) => fields[n] || [n]));
    if (names.size) off.add("preset");  // a preset is only the options it sets
    $$("#config .compile-opt").forEach((input) => {
      const dropped = off.has(input.name);
      input.disabled = dropped;
      const label = input.closest("label");
      if (!label) return;
      if (dropped && label.dataset.title === undefined) label.dataset.title = label.title;
      if (dropped) label.title = `not carried: a ${ui.kind === "tools" ? "tools source's tag" : "structural tag"} takes no ${input.name} (the compile lists it as not carried)`;
      else if (label.dataset.title !== undefined) { label.title = label.dataset.title; delete label.dataset.title; }
    });
  }

  // Source -> controls, after each change of the source (its compile) and of the kind.
  function sync() {
    document.body.classList.toggle("kind-tools", ui.kind === "tools");
    const tag = ui.kind === "tools" || ui.kind === "structural_tag";
    document.body.classList.toggle("kind-tag", tag);
    // A kind with no reasoning block sends no stack reasoning: a hidden select must not refuse
    // a JSON example's session (issue 45, B1); its value comes back with the tag kinds.
    $("#reasoning").disabled = !tag;
    flagReasoning();
    markNotCarried();
    if (ui.kind !== "tools") return;
    if (!flagsAsked) loadFlags();
    const data = parsed();
    $("#tools-note").textContent = data ? builderNote : "the controls edit the source once it is a JSON object";
    if (!data) return;
    $("#tools-builder").value = data.builder || "xgrammar";
    fillFormats(data.builder || "xgrammar", data.format);
    fillChoices(data);
    $("#tools-reasoning").value = data.reasoning || "auto";
    $("#tools-parallel").checked = data.parallel_tool_calls !== false;
    fillStrict(data);
    fillFlags(data);
  }

  // The same model family's format under the other builder (xgrammar's builtin key, vLLM's tool
  // parser), so that a builder switch keeps the format (issue 45, C4).
  const COUNTERPARTS = {
    qwen_3: "hermes", qwen_3_coder: "qwen3_coder", llama: "llama3_json", kimi: "kimi_k2",
    kimi_k3: "kimi_k3", deepseek_r1: "deepseek_v3", deepseek_v3_1: "deepseek_v31",
    deepseek_v3_2: "deepseek_v32", deepseek_v4: "deepseek_v4", deepseek_v4_1: "deepseek_v41",
    glm_4_7: "glm47", harmony: "openai", gemma_4: "gemma4", minimax: "minimax_m2",
    minimax_m3: "minimax_m3", mimo: "mimo",
  };
  const counterpart = (name, builder) => (builder === "vllm" ? COUNTERPARTS[name]
    : Object.keys(COUNTERPARTS).find((key) => COUNTERPARTS[key] === name));

  // A builder switch: the format's counterpart when it has one; else the format is left for the
  // user to pick (never silently the list's first name), and the note says so.
  function switchFormat(data, builder) {
    const usable = (name) => formats.some((f) => f.builder === builder && f.available && f.name === name);
    if (usable(data.format)) return "";
    const twin = counterpart(data.format, builder);
    if (twin && usable(twin)) {
      const was = data.format;
      data.format = twin;
      return `format ${was} is ${twin} under ${builder}`;
    }
    const was = data.format;
    return `${builder} has no counterpart of ${was}: pick its format`;
  }

  // Controls -> source: the field rewritten, the rest of the source kept.
  function edited(event) {
    const data = parsed();
    if (!data) return;
    const t = event.target;
    if (t.id === "tools-builder") {
      data.builder = t.value;
      // vLLM holds the mask off until the reasoning ends when it has a reasoning parser: its
      // default, so the stack's setting follows (the user may change it back).
      if (t.value === "vllm" && data.reasoning_parser) $("#reasoning").value = "mask_after_end";
      builderNote = switchFormat(data, t.value);
      MS.setSource(JSON.stringify(data, null, 2) + "\n");
      sync();
      return;
    }
    builderNote = "";
    if (t.id === "tools-format") data.format = t.value;
    else if (t.id === "tools-choice") {
      data.tool_choice = t.value.startsWith("function:")
        ? { type: "function", function: { name: t.value.slice("function:".length) } } : t.value;
    } else if (t.id === "tools-reasoning") data.reasoning = t.value;
    else if (t.id === "tools-parallel") data.parallel_tool_calls = t.checked;
    else if (t.dataset.tool) setStrict(data, t.dataset.tool, t.checked);
    else if (t.closest("#tools-serve-flags")) {
      const field = t.dataset.field;
      if (t.value === "") delete data[field];
      else data[field] = field === "strict_tool_calling" ? t.value === "true" : t.value;
      // vLLM masks nothing until its reasoning parser's end marker (its default)
      if (field === "reasoning_parser" && t.value) $("#reasoning").value = "mask_after_end";
    } else return;
    MS.setSource(JSON.stringify(data, null, 2) + "\n");
    sync();
  }

  function setStrict(data, name, on) {
    const tool = (data.tools || []).find((t) => t && t.function && t.function.name === name);
    if (!tool) return;
    if (on) tool.function.strict = true; else delete tool.function.strict;
  }

  // A replay's setting to try, applied: the field of the tools source, the stack's reasoning or
  // the preset it names; the compile follows, and the replay is pressed again by the user.
  function applySetting(field, value, tool) {
    if (field === "stack_reasoning") {
      $("#reasoning").value = value;
      MS.configChanged(true);
      return;
    }
    if (field === "preset") {
      const picker = $("#preset");
      picker.value = value;
      picker.dispatchEvent(new Event("change", { bubbles: true }));
      return;
    }
    const data = parsed();
    if (!data) return;
    if (field === "strict") setStrict(data, tool, true);
    else data[field] = value;
    if (field === "reasoning_parser") $("#reasoning").value = "mask_after_end";
    MS.setSource(JSON.stringify(data, null, 2) + "\n");
    sync();
  }

  // The tag the builder built, opened as a structural_tag source (a new setup).
  function openTag(button) {
    const tag = JSON.parse(button.dataset.tag);
    ui.sources.structural_tag = JSON.stringify(tag, null, 2) + "\n";
    MS.setKind("structural_tag");
    document.body.dispatchEvent(new CustomEvent("setup-replaced"));
    MS.configChanged(true);
  }

  async function loadFormats() {
    try {
      const response = await fetch(MS.url(MS.path("toolFormats")));
      if (response.ok) formats = await response.json();
    } catch (error) { /* the server is away: the picker stays as the source says */ }
    sync();
    // A builder whose library is still starting (vLLM's code) is one row named "starting".
    if (formats.some((f) => f.name === "starting")) setTimeout(loadFormats, 3000);
  }

  function bindTools() {
    const setKind = MS.setKind;
    MS.setKind = (kind) => { setKind(kind); sync(); };
    $("#tools-controls").addEventListener("change", edited);
    $("#reasoning").addEventListener("change", flagReasoning);
    document.body.addEventListener("click", (event) => {
      const button = event.target.closest("#btn-open-tag");
      if (button) openTag(button);
      const apply = event.target.closest("#btn-apply-setting");
      if (apply) {
        const row = apply.closest("#replay-setting");
        applySetting(row.dataset.field, JSON.parse(row.dataset.value), row.dataset.tool);
      }
    });
    document.body.addEventListener("htmx:afterSettle", (event) => {
      if (event.detail && event.detail.target && event.detail.target.id === "compile-result") sync();
    });
    $$('input[name="kind"]').forEach((r) => r.addEventListener("change", () => setTimeout(sync)));
    loadFormats();
  }

  Object.assign(MS, { bindTools, syncTools: sync, applySetting });
})();
