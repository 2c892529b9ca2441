// The Code dialog: opens with every target's snippet for the open session (or the form), copies one.
(() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);

  async function openCode() {
    const dialog = $("#code-dialog");
    const ui = window.maskscope ? window.maskscope.ui : null;
    // An open session holds the effective seed; a changed form has not started one yet.
    const values = ui && ui.sessionId && !ui.dirty ? { session: ui.sessionId } : {};
    $("#code-body").innerHTML = '<p class="muted empty">Writing the snippets…</p>';
    dialog.showModal();
    await htmx.ajax("POST", MS.path("export"), {
      source: "#config", target: "#code-body", swap: "innerHTML", values, indicator: "#code-spinner",
    });
  }

  function showTab(target) {
    document.querySelectorAll("#code-body .code-panel").forEach((panel) => {
      panel.hidden = panel.dataset.target !== target;
    });
  }

  async function copy(button) {
    const code = $(`.code-panel[data-target="${button.dataset.target}"] code`).textContent;
    try {
      await navigator.clipboard.writeText(code);
    } catch (error) {  // no clipboard permission: select the text and copy the old way
      const range = document.createRange();
      range.selectNodeContents($(`.code-panel[data-target="${button.dataset.target}"] code`));
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      document.execCommand("copy");
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const dialog = $("#code-dialog");
    $("#btn-code").addEventListener("click", openCode);
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog || event.target.closest(".close")) dialog.close();
      const button = event.target.closest("button.copy");
      if (button) copy(button);
    });
    dialog.addEventListener("change", (event) => {
      if (event.target.name === "code_target") showTab(event.target.value);
    });
  });
})();
