// Sending jobs: the form's Submit and Try first, one job per chosen file, each upload with its progress bar.

import { $, h } from "./dom.js";
import { fmtBytes, fmtDuration, isNum, shortId } from "./format.js";
import { ApiError, errorFromBody } from "./api.js";
import { token } from "./access-token.js";
import { errorNode, showError, toast } from "./notices.js";
import { state } from "./state.js";
import { updateSubmit } from "./form-choices.js";
import { formEntries } from "./form-fields.js";
import { dropEstimateInFlight } from "./form-estimate.js";
import { addJob, poll } from "./job-list.js";

export function submitJob(ev) {
  ev.preventDefault();
  if (state.xhr || !state.files.length) return;
  const entries = formEntries();
  if (entries) uploadEach(entries, state.files);
}

// "Try first N s": the same settings over the clip's first seconds. The whole clip is run from the short
// job's card once its result looks right; the server keeps the file for it (see runWhole).
export function tryFirst() {
  if (state.xhr || !state.files.length) return;
  const seconds = Number($("try-seconds").value);
  if (!(seconds > 0)) {
    showError($("form-error"), new ApiError(0, "invalid-range", "Give the seconds to try, more than 0."));
    $("try-seconds").focus();
    return;
  }
  const entries = formEntries();
  if (!entries) return;
  uploadEach([...entries, ["duration", String(seconds)]], state.files);
}

// One job per file, with the same fields, uploaded one after the other: each upload has the bandwidth to
// itself, and Cancel upload stops the rest. A file the box refuses does not stop the others; what each
// refusal said is shown together at the end.
async function uploadEach(entries, files) {
  const sending = [...files]; // a new choice while these upload does not change them
  const refused = [];
  showError($("form-error"), null);
  for (const [at, file] of sending.entries()) {
    const which = sending.length > 1 ? `File ${at + 1} of ${sending.length}, ${file.name}: ` : "";
    const outcome = await upload(entries, file, which);
    if (outcome.error) refused.push([sending.length > 1 ? file.name : null, outcome.error]);
    if (outcome.stop) break;
  }
  if (refused.length) showRefusals(refused);
}

// Each refusal as the box said it, named by its file when several were sent.
function showRefusals(refused) {
  const box = $("form-error");
  box.replaceChildren(...refused.flatMap(([name, err], at) => [
    at ? h("br") : null, name ? h("strong", { text: `${name}: ` }) : null, ...errorNode(err)].filter(Boolean)));
  box.hidden = false;
}

// Sends the fields and the file as a job. Resolves once the box answered (or the upload ended otherwise):
// `error` is what went wrong, `stop` whether the files after this one should be left unsent.
function upload(entries, file, which) {
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
  txt.textContent = `${which}Starting upload…`;
  updateSubmit();

  xhr.upload.addEventListener("progress", (e) => {
    const tot = e.lengthComputable ? e.total : total;
    const frac = tot ? e.loaded / tot : 0;
    bar.value = Math.min(1, frac);
    const secs = (performance.now() - started) / 1000;
    const rate = secs > 0 ? e.loaded / secs : 0;
    const eta = rate > 0 ? (tot - e.loaded) / rate : NaN;
    txt.textContent = `${which}${Math.round(frac * 100)}% · ${fmtBytes(e.loaded)} / ${fmtBytes(tot)} · ${fmtBytes(rate)}/s` +
      (frac < 1 && isNum(eta) ? ` · ${fmtDuration(eta)} left` : "");
  });
  xhr.upload.addEventListener("load", () => { bar.removeAttribute("value"); txt.textContent = `${which}Upload complete; waiting for the server…`; });

  return new Promise((resolve) => {
    const done = (outcome) => { state.xhr = null; $("upload").hidden = true; updateSubmit(); resolve(outcome); };
    xhr.addEventListener("load", () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        let job = null;
        try { job = JSON.parse(xhr.responseText); } catch (_) { /* ignore */ }
        // The files stay chosen (input, drop zone, state.files): the next try of another setting is one
        // click, not a second trip through the file picker.
        if (job && job.id) {
          addJob(job);
          toast(["Queued ", h("a", { href: `#job-${job.id}`, text: shortId(job.id) })]);
        } else {
          poll();
        }
        done({});
      } else {
        // A full queue or a refused token refuses the files after this one too.
        const error = errorFromBody(xhr.status, xhr.statusText, xhr.responseText);
        done({ error, stop: xhr.status === 401 || xhr.status === 403 || xhr.status === 429 });
      }
    });
    xhr.addEventListener("error", () => done({ error: new ApiError(0, "network-error", "Upload failed: connection lost."), stop: true }));
    xhr.addEventListener("abort", () => { toast("Upload cancelled."); done({ stop: true }); });
    xhr.open("POST", "/v1/jobs");
    xhr.setRequestHeader("Accept", "application/json");
    if (token()) xhr.setRequestHeader("Authorization", `Bearer ${token()}`);
    xhr.send(fd);
  });
}
