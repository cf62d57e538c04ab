// Live updates: an event stream (SSE) per active job, a few at a time; polling covers the rest.

import { withToken } from "./access-token.js";
import { state, TERMINAL } from "./state.js";

const MAX_STREAMS = 4;        // browsers allow ~6 HTTP/1.1 connections per host; keep room for uploads/polls

export function closeStream(id) {
  const es = state.streams.get(id);
  if (es) { es.close(); state.streams.delete(id); }
}

// Each event's job goes to `show` (job-list.js's showJob, which draws its card): the list is handed in, not
// imported, as the list itself opens the streams.
function openStream(id, show) {
  const es = new EventSource(withToken(`/v1/jobs/${encodeURIComponent(id)}/events`));
  state.streams.set(id, es);
  es.addEventListener("job", (ev) => {
    let job;
    try { job = JSON.parse(ev.data); } catch (_) { return; }
    if (!job || job.id !== id) return;
    state.streamFailures.delete(id);
    if (state.jobs.has(id)) show(job);
    if (TERMINAL.has(job.status)) { closeStream(id); syncStreams(show); }
  });
  es.addEventListener("error", () => {
    // CONNECTING: the browser retries by itself. CLOSED: give up; polling takes over.
    if (es.readyState === EventSource.CLOSED) {
      state.streams.delete(id);
      state.streamFailures.set(id, (state.streamFailures.get(id) || 0) + 1);
    }
  });
}

export function syncStreams(show) {
  if (typeof EventSource === "undefined") return;
  for (const [id] of state.streams) {
    const j = state.jobs.get(id);
    if (!j || TERMINAL.has(j.status)) closeStream(id);
  }
  const active = state.order.map((id) => state.jobs.get(id))
    .filter((j) => j && !TERMINAL.has(j.status) && !state.streams.has(j.id) && (state.streamFailures.get(j.id) || 0) < 3)
    .sort((a, b) => (a.status === "running" ? 0 : 1) - (b.status === "running" ? 0 : 1)
      || (b.priority || 0) - (a.priority || 0));
  for (const j of active) {
    if (state.streams.size >= MAX_STREAMS) break;
    openStream(j.id, show);
  }
}
