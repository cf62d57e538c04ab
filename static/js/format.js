// Numbers, sizes, durations, times and media as the page writes them.

export const DASH = "–";
export const isNum = (v) => typeof v === "number" && Number.isFinite(v);

export function fmtBytes(n) {
  if (!isNum(n)) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)} ${units[i]}`;
}
export const fmtSec = (s) => (isNum(s) ? `${s.toFixed(2)} s` : DASH);

export function fmtDuration(s) {
  if (!isNum(s) || s < 0) return DASH;
  s = Math.round(s);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export function parseTime(t) {
  if (!t) return null;
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? null : d;
}

export function fmtTime(t) {
  const d = parseTime(t);
  if (!d) return DASH;
  const sameDay = d.toDateString() === new Date().toDateString();
  return sameDay
    ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
    : d.toLocaleString([], { dateStyle: "short", timeStyle: "medium" });
}

export function fmtMedia(m) {
  if (!m) return "";
  const parts = [];
  if (isNum(m.width) && isNum(m.height)) parts.push(`${m.width}×${m.height}`);
  // A still picture has one frame and no rate or length worth a word.
  if (m.still) parts.push("picture");
  else {
    if (isNum(m.frames)) parts.push(`${m.frames} frames`);
    if (isNum(m.fps)) parts.push(`${m.fps.toFixed(2)} fps`);
    if (isNum(m.duration_s)) parts.push(fmtSec(m.duration_s));
  }
  if (m.codec) parts.push(m.codec);
  if (m.has_audio === true) parts.push("audio");
  return parts.join(" · ");
}

export function shortId(id) { return String(id || "").slice(0, 8); }

// What a job is called on its card, in Compare and in its progress bar's label: its file, or its id.
export function titleOf(job) { return (job.input && job.input.file_name) || shortId(job.id); }
