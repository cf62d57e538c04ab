// A card's Metrics (PSNR, SSIM, …).

import { kvTable } from "./dom.js";
import { DASH } from "./format.js";

export function metricsBlock(job) {
  const m = job.metrics;
  if (!m || typeof m !== "object" || !Object.keys(m).length) return null;
  const rows = Object.entries(m).map(([k, v]) => [k,
    v === null || v === undefined ? DASH
      : typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(4))
        : typeof v === "object" ? JSON.stringify(v) : String(v)]);
  return { key: "metrics", summary: "Metrics", table: kvTable("Metrics", rows) };
}
