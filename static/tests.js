// The Tests panel: schema unit tests kept in the page (and in permalinks), run on the server
// against the form's grammar after each successful compile, and opened in Replay on click.
(() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const shared = JSON.parse(($("#shared-tests") || { textContent: "[]" }).textContent || "[]");
  // Tests from a permalink carry the verdicts recorded at share time, to flag a change.
  const tests = shared.map((t) => ({ text: t.text, expect: t.expect, recorded: t.recorded }));

  async function run() {
    const result = $("#tests-result");
    if (!tests.length) {
      result.innerHTML = "";
      $("#tests-flag").textContent = "";
      return;
    }
    // Its own request source (static/playground/core.js): never queued behind, nor ahead of, a
    // request of another panel; an answer for an older setup is dropped.
    const spinner = $("#tests-spinner");
    if (spinner) spinner.classList.add("htmx-request");
    try {
      await MS.request("tests", "POST", MS.path("tests"), {
        target: "#tests-result", values: { tests: JSON.stringify(tests) }, form: true,
      });
    } finally {
      if (spinner) spinner.classList.remove("htmx-request");
    }
    const table = $("#tests-result .tests-table");
    const failed = table ? Number(table.dataset.failed) : 0;
    $("#tests-flag").textContent = failed ? String(failed) : "";
  }

  function add() {
    const text = $("#test-text").value;
    if (!text.trim()) return;
    tests.push({ text, expect: $("#test-expect").value });
    $("#test-text").value = "";
    run();
  }

  function openReplay(row) {
    MS.setDockMaximised(false);  // the replay opens in view (issue 45, C6)
    const replay = $('input[name="mode"][value="replay"]');
    replay.checked = true;
    replay.dispatchEvent(new Event("change", { bubbles: true }));
    $("#replay-text").value = row.dataset.judged;
    const token = row.dataset.token;
    if (token !== "") {
      const select = (event) => {
        if (event.detail.target.id !== "replay-result") return;
        document.body.removeEventListener("htmx:afterSettle", select);
        const chip = $(`#replay-result .chip[data-index="${token}"]`);
        if (chip) chip.click();
      };
      document.body.addEventListener("htmx:afterSettle", select);
    }
    $("#btn-replay").click();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#btn-add-test").addEventListener("click", add);
    $("#tests-result").addEventListener("click", (event) => {
      const remove = event.target.closest(".remove-test");
      if (remove) {
        tests.splice(Number(remove.dataset.index), 1);
        run();
        return;
      }
      const row = event.target.closest(".test-row");
      if (row) openReplay(row);
    });
    // After each successful compile: the schema or the options changed, the verdicts may too.
    document.body.addEventListener("doctor", run);
    // A kind change or an example loaded (static/playground/config.js): the tests were written
    // for the old setup and go with it.
    document.body.addEventListener("setup-replaced", () => {
      tests.length = 0;
      run();
    });
  });

  // What Share sends: the tests without their old verdicts (the server judges them again).
  window.maskscopeTests = {
    json: () => JSON.stringify(tests.map((t) => ({ text: t.text, expect: t.expect }))),
  };
})();
