// Live updates: an event stream (SSE) per active job, a few at a time; polling covers the rest.

import { withToken } from "./access-token.js";
import { state, TERMINAL } from "./state.js";
import { noteStatusChange } from "./health.js";
import { updateCount } from "./job-list.js";
import { renderJob } from "./job-card.js";

const MAX_STREAMS = 4;        // browsers allow ~6 HTTP/1.1 connections per host; keep room for uploads/polls

export function closeStream(id) {
  const es = state.streams.get(id);
  if (es) { es.close(); state.streams.delete(id); }
}

function openStream(id) {
  const es = new EventSource(withToken(`/v1/jobs/${encodeURIComponent(id)}/events`));
  state.streams.set(id, es);
  es.addEventListener("job", (ev) => {
    let job;
    try { job = JSON.parse(ev.data); } catch (_) { return; }
    if (!job || job.id !== id) return;
    state.streamFailures.delete(id);
    if (state.jobs.has(id)) {
      const prev = state.jobs.get(id);
      noteStatusChange(prev, job);
      if (prev && prev._localAt) job._localAt = prev._localAt;
      state.jobs.set(id, job);
      renderJob(job);
      updateCount();
    }
    if (TERMINAL.has(job.status)) { closeStream(id); syncStreams(); }
  });
  es.addEventListener("error", () => {
    // CONNECTING: the browser retries by itself. CLOSED: give up; polling takes over.
    if (es.readyState === EventSource.CLOSED) {
      state.streams.delete(id);
      state.streamFailures.set(id, (state.streamFailures.get(id) || 0) + 1);
    }
  });
}

export function syncStreams() {
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
    openStream(j.id);
  }
}
