// A job's card: its sections, each rebuilt only when its own part of the job changes.

import { h } from "./dom.js";
import { titleOf } from "./format.js";
import { state } from "./state.js";
import { buildProgress } from "./job-progress.js";
import { buildPlace, placeText } from "./queue-places.js";
import { buildTop, wholeClipOf } from "./card-head.js";
import { buildError, buildFacts } from "./card-facts.js";
import { timingsBlock } from "./timings-table.js";
import { planBlock } from "./plan-table.js";
import { metricsBlock } from "./metrics-table.js";

// A card is a list of sections; each section is rebuilt only when its own data changes,
// so buttons under the pointer are not swapped out on every progress event.

const SECTIONS = [
  { name: "top", sig: (j) => JSON.stringify([j.status, j.pausing, j.partial, j.started_at, j.op, j.model, j.params, j.priority, j.input && j.input.file_name, j.output && j.output.url, j.output && j.output.file_name, j.output && j.output.kept, wholeSig(j)]), build: buildTop },
  { name: "place", sig: (j) => JSON.stringify(placeText(j)), build: buildPlace },
  { name: "progress", sig: (j) => JSON.stringify([j.status, j.progress, j.started_at]), build: buildProgress },
  { name: "error", sig: (j) => JSON.stringify(j.error), build: buildError },
  { name: "facts", sig: (j) => JSON.stringify([j.id, j.input, j.output, j.estimate, j.created_at, j.started_at, j.finished_at]), build: buildFacts },
  { name: "timings", sig: (j) => JSON.stringify([j.status, j.timings]), block: timingsBlock },
  { name: "plan", sig: (j) => JSON.stringify(j.plan), block: planBlock },
  { name: "metrics", sig: (j) => JSON.stringify(j.metrics), block: metricsBlock },
];

// A try's top links to its whole clip once there is one (card-head.js): that job and its status are part of it.
function wholeSig(job) {
  const whole = job.params && job.params.range ? wholeClipOf(job) : null;
  return whole && [whole.id, whole.status];
}

// <details> sections keep their element (and open state); only summary text and table change.
function applyBlock(job, old, blk) {
  if (!blk) return null;
  if (old && old.tagName === "DETAILS") {
    const sum = old.querySelector("summary");
    if (sum.textContent !== blk.summary) sum.textContent = blk.summary;
    sum.nextElementSibling.replaceWith(blk.table);
    return old;
  }
  const k = `${job.id}:${blk.key}`;
  const d = h("details", { class: "block", open: state.openDetails.has(k) }, h("summary", { text: blk.summary }), blk.table);
  d.addEventListener("toggle", () => { if (d.open) state.openDetails.add(k); else state.openDetails.delete(k); });
  return d;
}

export function renderJob(job) {
  let card = state.cards.get(job.id);
  if (!card) {
    card = { el: h("li", { class: "job", id: `job-${job.id}` }), sigs: {}, nodes: {} };
    state.cards.set(job.id, card);
  }
  const st = job.status || "unknown";
  card.el.className = `job st-${st}`;
  card.el.setAttribute("aria-label", `${titleOf(job)}, ${st}`);
  let prev = null;
  for (const sec of SECTIONS) {
    const sig = sec.sig(job);
    let node = card.nodes[sec.name] || null;
    if (card.sigs[sec.name] !== sig) {
      card.sigs[sec.name] = sig;
      const next = sec.block ? applyBlock(job, node, sec.block(job)) : sec.build(job);
      if (node && node !== next) {
        const active = document.activeElement;
        const hadFocus = active && node.contains(active);
        const focusText = hadFocus ? (active.textContent || "").trim() : null;
        if (next) node.replaceWith(next); else node.remove();
        if (hadFocus) {
          const same = next && [...next.querySelectorAll("button, a, summary")]
            .find((n) => (n.textContent || "").trim() === focusText && !n.disabled);
          if (same) same.focus();
          else { card.el.setAttribute("tabindex", "-1"); card.el.focus(); }
        }
      }
      node = next;
      card.nodes[sec.name] = node;
    }
    if (node) {
      const want = prev ? prev.nextSibling : card.el.firstChild;
      if (want !== node) card.el.insertBefore(node, want);
      prev = node;
    }
  }
  return card.el;
}
