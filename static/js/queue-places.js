// A queued job's place in line and a guess at its wait, where there is a basis for one.

import { h } from "./dom.js";
import { fmtDuration, isNum, parseTime } from "./format.js";
import { api } from "./api.js";
import { state } from "./state.js";
import { etaOf } from "./job-progress.js";

// A queued job's place in the order workers claim jobs (higher priority first, then first come), and a
// guess at its wait: what the running jobs have left, plus for each job ahead the median run time of
// recent finished jobs of its op, shared among the workers. No guess where a part of it has no basis,
// nor while no worker is known to run jobs.
const RECENT_RUNS = 20;

function runSeconds(job) {
  const started = parseTime(job.started_at), finished = parseTime(job.finished_at);
  if (started && finished) return (finished.getTime() - started.getTime()) / 1000;
  return job.timings && isNum(job.timings.total) ? job.timings.total : null;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

// op -> median seconds, from `jobs` newest first.
function typicalRuns(jobs) {
  const runsByOp = new Map();
  for (const job of jobs) {
    const seconds = job.status === "succeeded" ? runSeconds(job) : null;
    if (!isNum(seconds)) continue;
    const runs = runsByOp.get(job.op) || [];
    if (runs.length < RECENT_RUNS) runs.push(seconds);
    runsByOp.set(job.op, runs);
  }
  return new Map([...runsByOp].map(([op, runs]) => [op, median(runs)]));
}

function remainingSeconds(job, typical) {
  const eta = etaOf(job);
  if (isNum(eta)) return Math.max(0, eta);
  const started = parseTime(job.started_at);
  const usual = typical.get(job.op);
  return started && isNum(usual) ? Math.max(0, usual - (Date.now() - started.getTime()) / 1000) : null;
}

// `jobs` in the server's order (newest first): id -> { position, waitS (null: no guess) }.
function queuePlaces(jobs, workers) {
  const typical = typicalRuns(jobs);
  const claimOrder = jobs.filter((j) => j.status === "queued").reverse() // first come first...
    .sort((a, b) => (b.priority || 0) - (a.priority || 0));             // ...within a priority (a stable sort)
  const addKnown = (sum, seconds) => (sum === null || !isNum(seconds) ? null : sum + seconds);
  let ahead = workers > 0 ? jobs.filter((j) => j.status === "running").reduce((sum, j) => addKnown(sum, remainingSeconds(j, typical)), 0) : null;
  const places = new Map();
  claimOrder.forEach((job, i) => {
    places.set(job.id, { position: i + 1, waitS: ahead === null ? null : ahead / workers });
    ahead = addKnown(ahead, typical.get(job.op));
  });
  return places;
}

// The jobs the places are counted among: the page's own list when it holds every job, else the queue,
// the running jobs and the recent finished ones asked for.
export async function refreshPlaces(listed) {
  if (![...state.jobs.values()].some((j) => j.status === "queued")) { state.places = new Map(); return; }
  const whole = !state.filter && (state.nextOffset === null || state.nextOffset === undefined);
  let jobs = listed;
  if (!whole) {
    const lists = await Promise.all([["queued", 500], ["running", 50], ["succeeded", 50]]
      .map(([status, limit]) => api("GET", `/v1/jobs?status=${status}&limit=${limit}`)));
    jobs = lists.flatMap((list) => (list && list.jobs) || []);
  }
  state.places = queuePlaces(jobs, state.workerCount);
}

export function placeText(job) {
  const place = job.status === "queued" ? state.places.get(job.id) : null;
  if (!place) return null;
  // "Next" only for the first in line: a short wait behind other jobs is still a wait (a median run
  // under a second once showed the second in line as "starts next").
  const next = place.position === 1 && place.waitS < 1;
  const wait = !isNum(place.waitS) ? "" : next ? " · starts next" : ` · starts in about ${fmtDuration(Math.max(1, place.waitS))}`;
  return `queued — position ${place.position}${wait}`;
}

export function buildPlace(job) {
  const text = placeText(job);
  return text ? h("p", { class: "queue-place", text }) : null;
}
