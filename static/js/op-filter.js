// The job list's op select: hide remote VAE calls, show them alone, or one op only.

import { $ } from "./dom.js";
import { state } from "./state.js";

const OP_FILTER_KEY = "vaebox.opFilter";
const VAE_CALL_OPS = new Set(["vae_encode", "vae_decode"]);

// A synchronous /v1/decode or /v1/encode call's job: its result went back in the call's answer and was not
// kept, which no other job's output says (kept: false). The API does not say which box answers a call, so
// one still running reads as an ordinary job until it has been answered.
function isRemoteCall(job) {
  return VAE_CALL_OPS.has(job.op) && !!job.output && job.output.kept === false;
}

// The op select: remote VAE calls (many and small, from a diffusers pipeline) can bury the jobs sent by
// hand, so they can be left out, or shown alone; or one op only.
export function shownByOpFilter(job) {
  const f = state.opFilter;
  if (!job || !f) return true;
  if (f === "not-remote") return !isRemoteCall(job);
  if (f === "remote") return isRemoteCall(job);
  return job.op === f;
}

export function storedOpFilter() {
  try { return localStorage.getItem(OP_FILTER_KEY) || ""; } catch (_) { return ""; }
}

export function setOpFilter(value) {
  const select = $("op-filter");
  select.value = value || "";
  if (select.value !== (value || "")) select.value = ""; // a kept choice this page no longer offers
  state.opFilter = select.value;
  try { localStorage.setItem(OP_FILTER_KEY, state.opFilter); } catch (_) { /* storage disabled */ }
}
