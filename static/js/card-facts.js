// A card's plain sections: the job's error, and its facts (input, output, what the box expected, times, id).

import { h } from "./dom.js";
import { DASH, fmtBytes, fmtDuration, fmtMedia, fmtTime, isNum } from "./format.js";
import { withToken } from "./access-token.js";

export function buildError(job) {
  if (!job.error) return null;
  return h("div", { class: "error-box job-error", role: "note" },
    h("code", { class: "err-code", text: job.error.code || "error" }), " ", job.error.message || "");
}

export function buildFacts(job) {
  const input = job.input || {};
  const facts = h("dl", { class: "facts" });
  const addFact = (k, ...v) => { facts.append(h("dt", { text: k }), h("dd", null, ...v)); };
  addFact("Input", input.file_name || DASH, " ", h("span", { class: "muted", text: fmtBytes(input.bytes) }),
    input.media ? h("span", { class: "media", text: fmtMedia(input.media) }) : null);
  if (job.output) {
    const o = job.output;
    addFact("Output",
      o.url && o.kept !== false ? h("a", { href: withToken(o.url), download: o.file_name || "", text: o.file_name || "result" }) : (o.file_name || DASH),
      " ", h("span", { class: "muted", text: fmtBytes(o.bytes) }),
      o.kept === false ? h("span", { class: "muted", text: " · returned to the caller, not kept" }) : null,
      o.media ? h("span", { class: "media", text: fmtMedia(o.media) }) : null);
  }
  // What the box expected when it queued the job (its basis, the earlier jobs it went by, on hover).
  const e = job.estimate;
  if (e) {
    const expected = [isNum(e.seconds) ? `about ${fmtDuration(e.seconds)}` : "no basis for a time yet",
      isNum(e.output_bytes) ? fmtBytes(e.output_bytes) : null].filter(Boolean).join(" · ");
    addFact("Expected", h("span", { class: "estimate", title: e.basis || "", text: expected }));
  }
  addFact("Created", h("time", { datetime: job.created_at || "", text: fmtTime(job.created_at) }),
    job.started_at ? h("span", { class: "muted", text: ` · started ${fmtTime(job.started_at)}` }) : null,
    job.finished_at ? h("span", { class: "muted", text: ` · finished ${fmtTime(job.finished_at)}` }) : null);
  if (Array.isArray(job.parts) && job.parts.length) addFact("Parts", buildParts(job.parts));
  addFact("ID", h("code", { class: "id", text: job.id }));
  return facts;
}

// A job run in parts: each part's frames, where it stands, on which worker, and how far it got.
function buildParts(parts) {
  return h("ol", { class: "parts" }, ...parts.map((part) => {
    const last = isNum(part.frames) ? part.first_frame + part.frames - 1 : "end";
    const p = part.progress;
    const done = part.status === "running" && p && isNum(p.fraction) ? ` ${Math.round(p.fraction * 100)} %` : "";
    const again = part.attempts > 1 ? ` · attempt ${part.attempts}` : "";
    return h("li", { class: `part ${part.status}`, title: part.error ? `${part.error.code}: ${part.error.message}` : "" },
      `frames ${part.first_frame}–${last}: ${part.status}${done}`,
      part.worker ? h("span", { class: "muted", text: ` · ${part.worker}${again}` }) : null);
  }));
}
