// The job list: polling /v1/jobs, Load more, and putting the cards in order on the page.

import { $ } from "./dom.js";
import { parseTime } from "./format.js";
import { api } from "./api.js";
import { showError } from "./notices.js";
import { PAGE, state, TERMINAL } from "./state.js";
import { noteStatusChange } from "./health.js";
import { shownByOpFilter } from "./op-filter.js";
import { closeStream, syncStreams } from "./event-stream.js";
import { refreshPlaces } from "./queue-places.js";
import { renderJob } from "./job-card.js";

const POLL_MS = 3000;         // job list refresh
const POLL_HIDDEN_MS = 15000; // when the tab is in the background

function upsertJob(job, prepend) {
  if (!job || !job.id) return;
  const had = state.jobs.has(job.id);
  state.jobs.set(job.id, job);
  if (!had && prepend) state.order.unshift(job.id);
  else if (!had) state.order.push(job.id);
}

// A job as it is now (a button's answer, an event of its stream), on its card if the list shows it.
export function showJob(job) {
  const previous = state.jobs.get(job.id);
  noteStatusChange(previous, job);
  if (previous && previous._localAt) job._localAt = previous._localAt;
  state.jobs.set(job.id, job);
  renderJob(job);
  updateCount();
}

// A job just made here (an upload, a whole clip): first in the list, followed at once, and kept until the
// list the box sends names it (see poll).
export function addJob(job) {
  job._localAt = Date.now();
  upsertJob(job, true);
  render();
  syncStreams(showJob);
}

// A deleted job: its card goes.
export function dropJob(id) {
  state.jobs.delete(id);
  state.order = state.order.filter((x) => x !== id);
  closeStream(id);
  render();
}

function listUrl(offset, limit) {
  const p = new URLSearchParams();
  if (state.filter) p.set("status", state.filter);
  p.set("limit", String(limit));
  p.set("offset", String(offset));
  return `/v1/jobs?${p}`;
}

let polling = false;
export async function poll() {
  if (polling) return;
  polling = true;
  clearTimeout(state.pollTimer);
  try {
    const limit = Math.max(PAGE, Math.min(state.loaded, 500));
    const data = await api("GET", listUrl(0, limit));
    const jobs = (data && data.jobs) || [];
    const fresh = new Map();
    for (const j of jobs) {
      // A live stream's copy has the latest progress; but a job run by a worker in another process reaches
      // the stream only when the server next looks at the store, so a newer status in the list wins.
      const cur = state.jobs.get(j.id);
      noteStatusChange(cur, j);
      const streamed = state.streams.has(j.id) && cur && !TERMINAL.has(j.status) && cur.status === j.status;
      fresh.set(j.id, streamed ? cur : j);
    }
    // Keep just-submitted jobs the list may not show yet (matching the filter).
    for (const id of state.order) {
      const j = state.jobs.get(id);
      if (!fresh.has(id) && j && j._localAt && Date.now() - j._localAt < 20000
          && (!state.filter || j.status === state.filter)) fresh.set(id, j);
    }
    for (const id of [...state.streams.keys()]) if (!fresh.has(id)) closeStream(id);
    state.jobs = fresh;
    state.order = [...fresh.values()].sort(byNewest).map((j) => j.id);
    state.nextOffset = data ? data.next_offset : null;
    showError($("jobs-error"), null);
    try { await refreshPlaces(jobs); } catch (_) { /* the places the jobs came with */ }
    render();
    syncStreams(showJob);
  } catch (e) {
    showError($("jobs-error"), e);
  } finally {
    polling = false;
    state.pollTimer = setTimeout(poll, document.hidden ? POLL_HIDDEN_MS : POLL_MS);
  }
}

function byNewest(a, b) {
  const ta = parseTime(a.created_at), tb = parseTime(b.created_at);
  return (tb ? tb.getTime() : 0) - (ta ? ta.getTime() : 0);
}

export async function loadMore() {
  if (state.nextOffset === null || state.nextOffset === undefined) return;
  const btn = $("more");
  btn.disabled = true;
  try {
    const data = await api("GET", listUrl(state.nextOffset, PAGE));
    for (const j of (data && data.jobs) || []) upsertJob(j, false);
    state.loaded = state.order.length;
    state.nextOffset = data ? data.next_offset : null;
    render();
  } catch (e) {
    showError($("jobs-error"), e);
  } finally {
    btn.disabled = false;
  }
}

function updateCount() {
  const n = state.order.length;
  const shown = state.order.filter((id) => shownByOpFilter(state.jobs.get(id))).length;
  const active = state.order.filter((id) => { const j = state.jobs.get(id); return j && !TERMINAL.has(j.status); }).length;
  const of = shown < n ? `${shown} of ${n} shown` : String(n);
  $("jobs-count").textContent = n ? `(${of}${active ? `, ${active} active` : ""})` : "";
}

export function render() {
  const list = $("jobs");
  // drop cards for jobs no longer shown
  for (const [id, c] of state.cards) {
    if (!state.jobs.has(id)) { c.el.remove(); state.cards.delete(id); }
  }
  let prev = null;
  for (const id of state.order) {
    const job = state.jobs.get(id);
    if (!job) continue;
    const el = renderJob(job);
    el.hidden = !shownByOpFilter(job);
    const want = prev ? prev.nextSibling : list.firstChild;
    if (want !== el) list.insertBefore(el, want);
    prev = el;
  }
  const shown = state.order.some((id) => shownByOpFilter(state.jobs.get(id)));
  $("jobs-empty").hidden = shown;
  $("jobs-empty").textContent = state.order.length ? "No jobs of the chosen op here."
    : state.filter ? `No ${state.filter} jobs.` : "No jobs yet.";
  $("more").hidden = state.nextOffset === null || state.nextOffset === undefined;
  updateCount();
}
