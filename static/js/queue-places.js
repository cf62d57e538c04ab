// A queued job's place in line and its expected start, as the box counts them; a running job's pause.

import { h } from "./dom.js";
import { fmtDuration, isNum } from "./format.js";
import { api } from "./api.js";
import { state } from "./state.js";

// The box fills in each queued job's `queue`: its place in the real claim order, counting every owner's
// jobs (on a shared box most of them are jobs this page cannot see), and `starts_in_s`. A copy of a job kept
// from its event stream has the place of the job's last change, so each poll brings the place the list
// says onto it; a queued card the list did not carry (one just sent) is looked up in the queue itself.
export async function refreshPlaces(listed) {
  const byId = new Map(listed.map((j) => [j.id, j]));
  const queued = [...state.jobs.values()].filter((j) => j.status === "queued");
  if (queued.some((j) => !byId.has(j.id))) {
    const data = await api("GET", "/v1/jobs?status=queued&limit=500");
    for (const j of (data && data.jobs) || []) byId.set(j.id, j);
  }
  for (const job of queued) {
    const fresh = byId.get(job.id);
    if (fresh && fresh.status === "queued") job.queue = fresh.queue;
  }
}

export function placeText(job) {
  if (job.status === "running" && job.pausing) return "pausing at the next checkpoint";
  const place = job.status === "queued" ? job.queue : null;
  if (!place || !isNum(place.position)) return null;
  // The box counts at least one worker; while /healthz names none (a queue-only box waiting for its first)
  // no start is promised.
  const waitS = state.workerCount > 0 ? place.starts_in_s : null;
  // "Next" only for the first in line: a short wait behind other jobs is still a wait (a median run
  // under a second once showed the second in line as "starts next").
  const next = place.position === 1 && waitS < 1;
  const wait = !isNum(waitS) ? "" : next ? " · starts next" : ` · starts in about ${fmtDuration(Math.max(1, waitS))}`;
  return `queued — position ${place.position}${wait}`;
}

export function buildPlace(job) {
  const text = placeText(job);
  return text ? h("p", { class: "queue-place", text }) : null;
}
