// A card's top: its thumbnail, status, title, what the job does, and its buttons.

import { h } from "./dom.js";
import { isNum, shortId } from "./format.js";
import { withToken } from "./access-token.js";
import { TERMINAL } from "./state.js";
import { cancelJob, deleteJob, runWhole } from "./job-actions.js";
import { thumbnailOf } from "./thumbnails.js";
import { canCompare, openCompare } from "./compare.js";

export function titleOf(job) { return (job.input && job.input.file_name) || shortId(job.id); }

function sizeText(params) {
  const r = params.restore || {};
  if (isNum(r.height) && isNum(r.width)) return `${r.width}×${r.height} area`;
  return params.scale ? `×${params.scale}` : null;
}

// The webhook's state: "webhook delivered", "webhook pending (2 tries)".
function callbackText(callback) {
  if (!callback || !callback.state) return null;
  const tries = Array.isArray(callback.deliveries) ? callback.deliveries.length : 0;
  return `webhook ${callback.state}${tries > 1 || (tries && callback.state !== "delivered") ? ` (${tries} tr${tries === 1 ? "y" : "ies"})` : ""}`;
}

// A job over part of its input: "first 5 s", "from 12.5 s, 48 frames".
function rangeText(range) {
  if (!range) return null;
  const from = isNum(range.start) ? `from ${range.start} s` : isNum(range.start_frame) ? `from frame ${range.start_frame}` : "";
  const length = isNum(range.duration) ? `${range.duration} s` : isNum(range.frames) ? `${range.frames} frames` : "to the end";
  return from ? `${from}, ${length}` : `first ${length}`;
}

export function buildTop(job) {
  const st = job.status || "unknown";
  const params = job.params || {};
  const title = titleOf(job);
  const head = h("div", { class: "job-head" },
    thumbnailOf(job),
    h("span", { class: `badge st-${st}`, text: st }),
    h("h3", { class: "job-title", title }, title),
    h("span", { class: "job-meta muted" },
      [job.op, job.model,
        sizeText(params),
        rangeText(params.range),
        job.from_try ? `whole clip of ${shortId(job.from_try)}` : null,
        params.dtype ? params.dtype : null,
        job.priority ? `prio ${job.priority}` : null,
        callbackText(job.callback)].filter(Boolean).join(" · ")));

  const actions = h("div", { class: "job-actions" });
  if (job.output && job.output.url && job.output.kept !== false && st === "succeeded") {
    actions.append(h("a", {
      class: "button primary", href: withToken(job.output.url), download: job.output.file_name || "",
      "aria-label": `Download ${job.output.file_name || "result"}`,
    }, "Download"));
  }
  if (st === "succeeded" && params.range) {
    actions.append(h("button", { type: "button", onclick: (e) => runWhole(job, e.currentTarget), "aria-label": `Run the whole clip of ${title} with the same settings` }, "Run the whole clip"));
  }
  if (canCompare(job)) {
    actions.append(h("button", { type: "button", onclick: () => openCompare(job.id), "aria-label": `Compare ${title} before and after` }, "Compare"));
  }
  if (st === "queued" || st === "running") {
    actions.append(h("button", { type: "button", onclick: (e) => cancelJob(job.id, e.currentTarget), "aria-label": `Cancel job ${title}` }, "Cancel"));
  }
  if (TERMINAL.has(st)) {
    actions.append(h("button", { type: "button", class: "danger", onclick: (e) => deleteJob(job.id, e.currentTarget), "aria-label": `Delete job ${title}` }, "Delete"));
  }
  return h("div", { class: "job-top" }, head, actions);
}
