// The page's entry: wires the form, the job list and Compare to the page, then starts the polls.
// Plain ES modules, no build step, no external resources; each file under /js/ has one job.

import { $ } from "./dom.js";
import { PAGE, state } from "./state.js";
import { refreshHealth } from "./health.js";
import { savePrefs } from "./form-prefs.js";
import { applyPreset, loadPresets } from "./presets.js";
import { loadModels, onModelChange, onOpChange, onScaleChange, showAllSettings, updateSubmit } from "./form-choices.js";
import { setupDrop } from "./file-choice.js";
import { estimateSoon } from "./form-estimate.js";
import { submitJob, tryFirst } from "./upload.js";
import { addJob, dropJob, loadMore, poll, render, showJob } from "./job-list.js";
import { connectActionsToList } from "./job-actions.js";
import { setOpFilter, storedOpFilter } from "./op-filter.js";
import { closeStream } from "./event-stream.js";
import { tick } from "./job-progress.js";
import { compareFromHash, setupCompare } from "./compare.js";

const HEALTH_MS = 5000;

function init() {
  connectActionsToList({ show: showJob, add: addJob, drop: dropJob });
  setupDrop();
  $("job-form").addEventListener("submit", submitJob);
  $("job-form").addEventListener("change", estimateSoon); // the estimate follows the settings
  $("try-first").addEventListener("click", tryFirst);
  $("all-settings").addEventListener("click", () => showAllSettings(!$("job-form").classList.contains("all-settings")));
  $("abort").addEventListener("click", () => { if (state.xhr) state.xhr.abort(); });
  $("op").addEventListener("change", () => { onOpChange(); savePrefs(); });
  $("preset").addEventListener("change", (e) => applyPreset(e.target.value));
  $("model").addEventListener("change", () => { onModelChange(); savePrefs(); });
  $("scale").addEventListener("change", onScaleChange);
  $("rate").addEventListener("change", onScaleChange);
  $("vae").addEventListener("change", updateSubmit);
  // The server's default overlap depends on the batch size (4 above 8 frames, else none).
  $("batch-frames").addEventListener("input", (e) => {
    const frames = Number(e.target.value);
    $("batch-overlap").placeholder = frames > 0 && frames <= 8 ? "0" : "4";
  });
  for (const id of ["scale", "dtype", "priority", "color-fix"]) $(id).addEventListener("change", savePrefs);
  $("status-filter").addEventListener("change", (e) => {
    state.filter = e.target.value;
    state.loaded = PAGE;
    for (const id of [...state.streams.keys()]) closeStream(id);
    state.jobs = new Map(); state.order = [];
    render();
    poll();
  });
  $("op-filter").addEventListener("change", (e) => { setOpFilter(e.target.value); render(); });
  $("refresh").addEventListener("click", () => { state.streamFailures.clear(); poll(); refreshHealth(); });
  $("more").addEventListener("click", loadMore);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) { poll(); refreshHealth(); } });
  window.addEventListener("beforeunload", (e) => { if (state.xhr) { e.preventDefault(); e.returnValue = ""; } });

  // The op select is kept in this browser, as the form's choices are: one who hides remote calls wants them hidden tomorrow.
  setOpFilter(storedOpFilter());
  setupCompare();
  compareFromHash();
  updateSubmit();
  loadModels();
  loadPresets();
  refreshHealth();
  setInterval(refreshHealth, HEALTH_MS);
  setInterval(tick, 1000);
  poll();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
