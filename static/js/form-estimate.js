// Under the form: what the box expects the chosen file with the form's settings to take (POST /v1/estimate).
// Several files are not estimated: the box reads each whole to answer, which would cost as much as the uploads.

import { $ } from "./dom.js";
import { fmtBytes, fmtDuration, isNum } from "./format.js";
import { authHeaders } from "./access-token.js";
import { state } from "./state.js";
import { checkedEntries } from "./form-fields.js";

// The box reads the whole file to answer (it checks and probes it as a submission's), so a burst of
// changes asks once, after they settle, and a question for an earlier choice is called off.
const SETTLE_MS = 400;
let settleTimer = null;
let asking = null; // the AbortController of the question in flight

export function estimateSoon() {
  clearTimeout(settleTimer);
  settleTimer = setTimeout(askEstimate, SETTLE_MS);
}

// Stops a question in flight (an upload starts: it should have the bandwidth); an answer already shown stays.
export function dropEstimateInFlight() {
  clearTimeout(settleTimer);
  if (!asking) return;
  asking.abort();
  asking = null;
  $("estimate").hidden = true;
}

async function askEstimate() {
  if (asking) asking.abort();
  asking = null;
  const line = $("estimate");
  let entries = null;
  const file = state.files.length === 1 ? state.files[0] : null;
  try { entries = file && !state.xhr ? checkedEntries() : null; } catch (_) { /* Submit says what to fix */ }
  if (!entries) { line.hidden = true; return; }
  const body = new FormData();
  for (const [k, v] of entries) body.append(k, v);
  body.append("file", file, file.name);
  const ask = new AbortController();
  asking = ask;
  line.removeAttribute("title");
  line.textContent = "Estimating…";
  line.hidden = false;
  let estimate = null;
  try {
    const res = await fetch("/v1/estimate", { method: "POST", body, headers: authHeaders({ Accept: "application/json" }), signal: ask.signal });
    estimate = res.ok ? await res.json() : null;
  } catch (_) { /* called off, or no answer: no line */ }
  if (asking !== ask) return;
  asking = null;
  showEstimate(line, estimate);
}

// "about 40s on this box · 600 frames 512×384 · about 12.0 MiB"; a failed question hides the line.
function showEstimate(line, e) {
  if (!e || !isNum(e.frames)) { line.hidden = true; return; }
  const time = isNum(e.seconds) ? `about ${fmtDuration(e.seconds)} on this box` : "no basis for a time yet (no such job finished here)";
  const size = `${e.frames} frame${e.frames === 1 ? "" : "s"}${isNum(e.width) && isNum(e.height) ? ` ${e.width}×${e.height}` : ""}`;
  line.textContent = [time, size, isNum(e.output_bytes) ? `about ${fmtBytes(e.output_bytes)}` : null].filter(Boolean).join(" · ");
  if (e.basis) line.title = `From ${e.basis}`;
  line.hidden = false;
}
