// The header's health line: device, queue, running job and workers, from /healthz.

import { $, h } from "./dom.js";
import { DASH, isNum, shortId } from "./format.js";
import { api } from "./api.js";
import { state, TERMINAL } from "./state.js";

// The header names the running job. Besides its own timer (which a background tab slows to once a
// minute), it is asked again whenever a job the page follows changes status, so it follows the job.
let healthSoonTimer = null;
function refreshHealthSoon(delayMs) {
  clearTimeout(healthSoonTimer);
  healthSoonTimer = setTimeout(refreshHealth, delayMs || 150);
}

export function noteStatusChange(previous, job) {
  if (previous && job && previous.status !== job.status) refreshHealthSoon();
}

// Whether /healthz still names as running a job the page already saw end (the store says so a moment
// after the job's own event); a few such answers are asked again, then left to the timer.
let staleHealthRetries = 0;
function namesEndedJob(hz) {
  const ended = (id) => { const j = id && state.jobs.get(id); return !!j && TERMINAL.has(j.status); };
  return ended(hz.running_job) || (hz.workers || []).some((w) => ended(w.current_job));
}

// Who holds the executor: a job this page lists, with its owner (an admin's page lists everyone's), or one it
// does not list (on a box with tokens, most often another user's, which this user may not see).
function runningJob(id) {
  const job = state.jobs.get(id);
  if (!job) return h("span", { class: "hz-other", title: id, text: "a job not listed here" });
  const link = h("a", { href: `#job-${id}`, title: id, text: shortId(id) });
  return job.owner ? h("span", {}, link, h("span", { class: "muted", text: ` (${job.owner})` })) : link;
}

export async function refreshHealth() {
  const box = $("health");
  const text = $("health-text");
  try {
    const hz = await api("GET", "/healthz");
    box.dataset.state = hz.status === "ok" ? "ok" : "warn";
    const parts = [
      h("span", { class: "hz-item" }, h("span", { class: "muted", text: "device " }), h("strong", { text: hz.device || DASH })),
      h("span", { class: "hz-item" }, h("span", { class: "muted", text: "queue " }), h("strong", { text: isNum(hz.queue_depth) ? hz.queue_depth : DASH })),
    ];
    if (hz.running_job) {
      parts.push(h("span", { class: "hz-item" }, h("span", { class: "muted", text: "running " }), runningJob(hz.running_job)));
    } else {
      parts.push(h("span", { class: "hz-item muted", text: "idle" }));
    }
    // Several boxes on one queue: each worker, its device (and the memory it offers) and what it runs.
    const memoryNote = (bytes) => (bytes == null ? "" : `, ${(bytes / 2 ** 30).toFixed(1)} GiB`);
    for (const w of (hz.workers || []).filter(() => (hz.workers || []).length > 1 || hz.device === "none")) {
      const doing = w.current_job ? runningJob(w.current_job) : h("span", { class: "muted", text: "idle" });
      parts.push(h("span", { class: "hz-item hz-worker", title: `last heartbeat ${w.last_heartbeat}` },
        h("span", { class: "muted", text: `${w.name} (${w.device}${memoryNote(w.device_memory_bytes)}) ` }), doing));
    }
    state.workerCount = (hz.workers || []).length;
    if (namesEndedJob(hz) && staleHealthRetries < 5) { staleHealthRetries++; refreshHealthSoon(1000); }
    else staleHealthRetries = 0;
    if (hz.status && hz.status !== "ok") parts.unshift(h("strong", { text: hz.status }));
    if (hz.version) parts.push(h("span", { class: "hz-item muted", text: `v${hz.version}` }));
    text.replaceChildren(...parts.flatMap((n, i) => (i ? [" ", n] : [n])));
    if (hz.output_formats) {
      for (const option of $("output-format").options) {
        const available = !option.value || hz.output_formats[option.value] !== false;
        option.disabled = !available;
        option.title = available ? "" : "this box's ffmpeg has no encoder for it";
      }
      if (hz.default_output_format) $("output-format").options[0].textContent = `box default (${hz.default_output_format})`;
    }
  } catch (e) {
    box.dataset.state = "down";
    text.replaceChildren(h("strong", { text: "unreachable" }), " ", h("span", { class: "muted", text: e.code === "network-error" ? "" : `${e.code}` }));
  }
}
