// A card's top: its thumbnail, status, title, what the job does, and its buttons.

import { h } from "./dom.js";
import { isNum, shortId, titleOf } from "./format.js";
import { withToken } from "./access-token.js";
import { state, TERMINAL } from "./state.js";
import { cancelJob, deleteJob, pauseJob, resumeJob, runWhole, stopAndKeep } from "./job-actions.js";
import { thumbnailOf } from "./thumbnails.js";
import { canCompare, openCompare } from "./compare.js";

// The whole-clip job made from this try (its `from_try` names the try), if the page lists one that is not
// failed or cancelled: the box would answer "asked for before" to a second Run the whole clip (a paused one
// is resumed, not run twice), so the card links to it instead. The newest such job wins, as on the box.
export function wholeClipOf(job) {
  for (const id of state.order) {
    const other = state.jobs.get(id);
    if (other && other.from_try === job.id && !["failed", "cancelled"].includes(other.status)) return other;
  }
  return null;
}

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

// Only a video written in segments has finished frames to keep (the box says nothing-to-keep for a latent,
// a still or PNG frames); a paused job has some only if it ran before it paused.
const VIDEO_OPS = new Set(["upscale", "interpolate", "restore", "vae_decode", "vae_reconstruct"]);
function keepsFinishedFrames(job) {
  const format = (job.params || {}).output_format;
  const still = job.input && job.input.media && job.input.media.still;
  const ran = job.status === "running" || (job.status === "paused" && !!job.started_at);
  return ran && VIDEO_OPS.has(job.op) && !["png", "png16", "safetensors"].includes(format) && !still;
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
  const button = (label, onclick, ariaLabel, cls) => h("button", { type: "button", class: cls, onclick: (e) => onclick(e.currentTarget), "aria-label": ariaLabel }, label);
  const download = job.output && job.output.url && job.output.kept !== false && (st === "succeeded" || (st === "cancelled" && job.partial));
  if (download) {
    const label = job.partial ? "Download partial" : "Download";
    actions.append(h("a", {
      class: "button primary", href: withToken(job.output.url), download: job.output.file_name || "",
      "aria-label": `${label} ${job.output.file_name || "result"}`,
    }, label));
  }
  if (st === "succeeded" && params.range) {
    const whole = wholeClipOf(job);
    if (whole) {
      actions.append(h("a", {
        class: "button whole-clip", href: `#job-${whole.id}`,
        "aria-label": `The whole clip of ${title}: job ${shortId(whole.id)}, ${whole.status}`,
      }, `Whole clip (${whole.status})`));
    } else {
      actions.append(button("Run the whole clip", (b) => runWhole(job, b), `Run the whole clip of ${title} with the same settings`));
    }
  }
  if (canCompare(job)) {
    actions.append(button("Compare", () => openCompare(job.id), `Compare ${title} before and after`));
  }
  if (st === "queued" || (st === "running" && !job.pausing)) {
    actions.append(button("Pause", (b) => pauseJob(job.id, b), `Pause job ${title}`));
  }
  // A running job asked to pause can still be told to run on.
  if (st === "paused" || (st === "running" && job.pausing)) {
    actions.append(button("Resume", (b) => resumeJob(job.id, b), `Resume job ${title}`));
  }
  if (keepsFinishedFrames(job)) {
    actions.append(button("Stop and keep", (b) => stopAndKeep(job.id, b), `Stop job ${title} and keep the frames it finished`));
  }
  if (st === "queued" || st === "running" || st === "paused") {
    actions.append(button("Cancel", (b) => cancelJob(job.id, b), `Cancel job ${title}`));
  }
  if (TERMINAL.has(st)) {
    actions.append(button("Delete", (b) => deleteJob(job.id, b), `Delete job ${title}`, "danger"));
  }
  return h("div", { class: "job-top" }, head, actions);
}
