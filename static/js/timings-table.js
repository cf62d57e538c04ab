// A card's Timings: the stages' durations, a restore's compute split, the rest as key/value pairs.

import { h, kvTable } from "./dom.js";
import { DASH, fmtBytes, fmtSec, isNum } from "./format.js";

const TIMING_KEYS = ["queued", "probe", "load_model", "read", "compute", "write", "total", "fps",
  "peak_host_bytes", "peak_device_bytes", "device", "dtype"];
const TIMING_LABELS = {
  queued: "Queued", probe: "Probe", load_model: "Load model", read: "Read", compute: "Compute",
  write: "Write", total: "Total", fps: "Throughput", peak_host_bytes: "Peak host memory",
  peak_device_bytes: "Peak device memory", device: "Device", dtype: "Precision",
  encode: "Encode", dit: "DiT", decode: "Decode", color_fix: "Colour fix",
};
// A restore job's compute time, split by stage (they add up to `compute`).
const COMPUTE_SPLIT_KEYS = ["encode", "dit", "decode", "color_fix"];

function timingValue(key, v) {
  if (v === null || v === undefined || v === "") return DASH;
  if (key.endsWith("_bytes")) return fmtBytes(v);
  if (key === "fps") return isNum(v) ? `${v.toFixed(2)} fps` : String(v);
  if (typeof v === "number") return fmtSec(v);
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

const STAGE_KEYS = ["queued", "probe", "load_model", "read", "compute", "write", "total"];

export function timingsBlock(job) {
  const t = job.timings && typeof job.timings === "object" ? job.timings : null;
  const hasAny = t && Object.keys(t).length > 0;
  if (!hasAny && job.status !== "running") return null;
  const tt = t || {};
  // Stage durations as one row (columns = stages), the rest as key/value pairs.
  const stages = h("table", { class: "stages" },
    h("caption", { class: "visually-hidden", text: "Stage timings in seconds" }),
    h("thead", null, h("tr", null, STAGE_KEYS.map((k) => h("th", { scope: "col", text: TIMING_LABELS[k] })))),
    h("tbody", null, h("tr", null, STAGE_KEYS.map((k) => h("td", { class: k === "total" ? "total" : null, text: timingValue(k, tt[k]) })))));
  const splitKeys = COMPUTE_SPLIT_KEYS.filter((k) => k in tt);
  const split = splitKeys.length ? h("table", { class: "stages compute-split" },
    h("caption", { class: "visually-hidden", text: "Compute time by stage, in seconds" }),
    h("thead", null, h("tr", null, h("td"), splitKeys.map((k) => h("th", { scope: "col", text: TIMING_LABELS[k] })))),
    h("tbody", null, h("tr", null, h("th", { scope: "row", text: `${TIMING_LABELS.compute}:` }),
      splitKeys.map((k) => h("td", { text: timingValue(k, tt[k]) }))))) : null;
  const other = [...TIMING_KEYS.filter((k) => !STAGE_KEYS.includes(k)),
    ...Object.keys(tt).filter((k) => !TIMING_KEYS.includes(k) && !COMPUTE_SPLIT_KEYS.includes(k))];
  const table = h("div", { class: "timings" },
    h("div", { class: "scroll-x" }, stages, split),
    kvTable("Other timings", other.map((k) => [TIMING_LABELS[k] || k, timingValue(k, tt[k])])));
  const bits = [isNum(tt.total) ? `${fmtSec(tt.total)} total` : null, isNum(tt.dit) ? `DiT ${fmtSec(tt.dit)}` : null,
    isNum(tt.fps) ? `${tt.fps.toFixed(2)} fps` : null].filter(Boolean);
  return { key: "timings", summary: `Timings${bits.length ? ` — ${bits.join(" · ")}` : ""}`, table };
}
