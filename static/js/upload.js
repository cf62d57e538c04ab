// Sending a job: the form's Submit and Try first, the upload with its progress bar.

import { $, h } from "./dom.js";
import { fmtBytes, fmtDuration, isNum, shortId } from "./format.js";
import { ApiError, errorFromBody } from "./api.js";
import { token } from "./access-token.js";
import { showError, toast } from "./notices.js";
import { state } from "./state.js";
import { updateSubmit } from "./form-choices.js";
import { formEntries } from "./form-fields.js";
import { dropEstimateInFlight } from "./form-estimate.js";
import { poll, render, upsertJob } from "./job-list.js";
import { syncStreams } from "./event-stream.js";

export function submitJob(ev) {
  ev.preventDefault();
  if (state.xhr || !state.file) return;
  const entries = formEntries();
  if (entries) upload(entries, state.file);
}

// "Try first N s": the same settings over the clip's first seconds. The whole clip is run from the short
// job's card once its result looks right; the server keeps the file for it (see runWhole).
export function tryFirst() {
  if (state.xhr || !state.file) return;
  const seconds = Number($("try-seconds").value);
  if (!(seconds > 0)) {
    showError($("form-error"), new ApiError(0, "invalid-range", "Give the seconds to try, more than 0."));
    $("try-seconds").focus();
    return;
  }
  const entries = formEntries();
  if (!entries) return;
  upload([...entries, ["duration", String(seconds)]], state.file);
}

// Sends the fields and the file as a job.
function upload(entries, file) {
  const fd = new FormData();
  // Text fields first so a streaming server can validate before reading the file.
  for (const [k, v] of entries) fd.append(k, v);
  fd.append("file", file, file.name);

  dropEstimateInFlight();
  const xhr = new XMLHttpRequest();
  state.xhr = xhr;
  const bar = $("upload-progress");
  const txt = $("upload-text");
  const total = file.size;
  const started = performance.now();
  bar.value = 0;
  $("upload").hidden = false;
  txt.textContent = "Starting upload…";
  showError($("form-error"), null);
  updateSubmit();

  xhr.upload.addEventListener("progress", (e) => {
    const tot = e.lengthComputable ? e.total : total;
    const frac = tot ? e.loaded / tot : 0;
    bar.value = Math.min(1, frac);
    const secs = (performance.now() - started) / 1000;
    const rate = secs > 0 ? e.loaded / secs : 0;
    const eta = rate > 0 ? (tot - e.loaded) / rate : NaN;
    txt.textContent = `${Math.round(frac * 100)}% · ${fmtBytes(e.loaded)} / ${fmtBytes(tot)} · ${fmtBytes(rate)}/s` +
      (frac < 1 && isNum(eta) ? ` · ${fmtDuration(eta)} left` : "");
  });
  xhr.upload.addEventListener("load", () => { bar.removeAttribute("value"); txt.textContent = "Upload complete; waiting for the server…"; });

  const done = () => { state.xhr = null; updateSubmit(); };
  xhr.addEventListener("load", () => {
    done();
    if (xhr.status >= 200 && xhr.status < 300) {
      let job = null;
      try { job = JSON.parse(xhr.responseText); } catch (_) { /* ignore */ }
      $("upload").hidden = true;
      // The file stays chosen (input, drop zone, state.file): the next try of another setting is one click,
      // not a second trip through the file picker.
      if (job && job.id) {
        job._localAt = Date.now();
        upsertJob(job, true);
        render();
        syncStreams();
        toast(["Queued ", h("a", { href: `#job-${job.id}`, text: shortId(job.id) })]);
      } else {
        poll();
      }
    } else {
      $("upload").hidden = true;
      showError($("form-error"), errorFromBody(xhr.status, xhr.statusText, xhr.responseText));
    }
  });
  xhr.addEventListener("error", () => {
    done(); $("upload").hidden = true;
    showError($("form-error"), new ApiError(0, "network-error", "Upload failed: connection lost."));
  });
  xhr.addEventListener("abort", () => {
    done(); $("upload").hidden = true;
    toast("Upload cancelled.");
  });
  xhr.open("POST", "/v1/jobs");
  xhr.setRequestHeader("Accept", "application/json");
  if (token()) xhr.setRequestHeader("Authorization", `Bearer ${token()}`);
  xhr.send(fd);
}
