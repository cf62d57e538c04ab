// A running job's progress bar, its ETA and the elapsed times that tick every second.

import { h } from "./dom.js";
import { fmtDuration, isNum, parseTime, titleOf } from "./format.js";

function etaOf(job) {
  const p = job.progress || {};
  if (isNum(p.eta_s)) return p.eta_s;
  const started = parseTime(job.started_at);
  if (job.status === "running" && started && isNum(p.fraction) && p.fraction > 0.02 && p.fraction < 1) {
    const el = (Date.now() - started.getTime()) / 1000;
    return el * (1 - p.fraction) / p.fraction;
  }
  return null;
}

function fractionOf(job) {
  const p = job.progress || {};
  if (isNum(p.fraction)) return Math.max(0, Math.min(1, p.fraction));
  if (isNum(p.done) && isNum(p.total) && p.total > 0) return Math.max(0, Math.min(1, p.done / p.total));
  return null;
}

export function buildProgress(job) {
  const st = job.status;
  const frac = fractionOf(job);
  if (!(st === "running" || (st === "queued" && frac))) return null;
  const p = job.progress || {};
  const eta = etaOf(job);
  const started = parseTime(job.started_at);
  const label = [
    frac !== null ? `${(frac * 100).toFixed(1)}%` : "working…",
    p.stage || null,
    isNum(p.done) && isNum(p.total) && p.total > 0 ? `${p.done} / ${p.total} ${p.unit || ""}`.trim() : null,
    eta !== null ? `ETA ${fmtDuration(eta)}` : null,
  ].filter(Boolean).join(" · ");
  const prog = h("progress", { max: "1", "aria-label": `Progress of ${titleOf(job)}` });
  if (frac !== null) prog.value = frac;
  return h("div", { class: "job-progress" }, prog,
    h("span", { class: "progress-text" }, label,
      started ? h("span", { class: "muted" }, " · elapsed ",
        h("span", { class: "elapsed", "data-since": job.started_at, text: fmtDuration((Date.now() - started.getTime()) / 1000) })) : null));
}

export function tick() {
  for (const el of document.querySelectorAll(".elapsed[data-since]")) {
    const d = parseTime(el.dataset.since);
    if (d) el.textContent = fmtDuration((Date.now() - d.getTime()) / 1000);
  }
}
