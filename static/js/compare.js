// Compare: a job's input and output played one over the other, with a split, frame steps and 1:1.

import { $ } from "./dom.js";
import { isNum, shortId, titleOf } from "./format.js";
import { api } from "./api.js";
import { withToken } from "./access-token.js";
import { state } from "./state.js";

const COMPARABLE_OPS = new Set(["upscale", "restore", "vae_reconstruct"]);
export function canCompare(job) {
  return job.status === "succeeded" && COMPARABLE_OPS.has(job.op) && job.input && job.input.media && job.output && job.output.kept !== false && job.output.media;
}

// Before (the input) under after (the output), the output clipped to the right of the split.
// Both are served at the same width, frame for frame; the output's clock leads and the input follows.
const compare = { id: null, job: null, oneToOne: false };
const FIT_HEIGHT = 0.7; // of the window, as .compare-stage's max-height

function setSplit(percent) {
  const p = Math.min(100, Math.max(0, Number(percent)));
  $("compare-after").style.clipPath = `inset(0 0 0 ${p}%)`;
  $("compare-divider").style.left = `${p}%`;
  $("compare-split").value = String(p);
}

// The address names the open comparison (`#compare=<job id>`), so it can be shared, bookmarked, reloaded.
function setCompareHash(id) {
  const hash = id ? `#compare=${encodeURIComponent(id)}` : "";
  if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname + location.search);
}

export function openCompare(id, split) {
  const before = $("compare-before");
  const after = $("compare-after");
  compare.id = id;
  compare.job = state.jobs.get(id) || null;
  $("compare-status").textContent = "loading (a first view makes the previews)…";
  before.src = withToken(`/v1/jobs/${id}/preview?side=input`);
  after.src = withToken(`/v1/jobs/${id}/preview?side=output`);
  showCompareTitle();
  showPlayback();
  // Opened from the address before the list came: the job (its name, its frame rate) is asked for.
  if (!compare.job) {
    api("GET", `/v1/jobs/${encodeURIComponent(id)}`)
      .then((job) => { if (compare.id === id) { compare.job = job; showCompareTitle(); showPlayback(); showPosition(); } })
      .catch(() => {});
  }
  setSplit(split === undefined ? 50 : split);
  setOneToOne(false);
  $("compare-seek").max = "0";
  $("compare-seek").value = "0";
  $("compare-time").textContent = "";
  $("compare-play").textContent = "Play";
  const dialog = $("compare");
  if (!dialog.open) dialog.showModal();
  setCompareHash(id);
}

// A still (a picture upscaled or restored) is one frame: Play, the seek bar and the frame steps would do
// nothing, so they are hidden; the split works as for a video.
function isStill(job) {
  const still = (media) => !!media && media.still === true;
  return !!job && (still(job.input && job.input.media) || still(job.output && job.output.media));
}

function showPlayback() {
  $("compare-playback").hidden = isStill(compare.job);
}

function showCompareTitle() {
  const job = compare.job;
  $("compare-title").textContent = `Before / after: ${job ? titleOf(job) : shortId(compare.id)}`;
}

function closeCompare() {
  compare.id = null;
  compare.job = null;
  for (const v of [$("compare-before"), $("compare-after")]) {
    if (!v.getAttribute("src")) continue;
    v.pause(); v.removeAttribute("src"); v.load();
  }
  if ($("compare").open) $("compare").close();
  setCompareHash(null);
}

function followLeader() {
  const before = $("compare-before");
  const after = $("compare-after");
  if (Math.abs(before.currentTime - after.currentTime) > 0.04) before.currentTime = after.currentTime;
}

// The picture at the video's displayed size (its pixel aspect applied by the browser): 1:1, scrolled
// in the stage where larger, or scaled to the stage's width and the window's height.
function layoutCompare() {
  const after = $("compare-after");
  const frame = $("compare-frame");
  const width = after.videoWidth, height = after.videoHeight;
  if (!width || !height) { frame.style.width = ""; frame.style.height = ""; return; }
  const stage = $("compare-stage");
  const scale = compare.oneToOne ? 1 : Math.min(stage.clientWidth / width, (window.innerHeight * FIT_HEIGHT) / height);
  frame.style.width = `${Math.floor(width * scale)}px`;
  frame.style.height = `${Math.floor(height * scale)}px`;
}

function setOneToOne(on) {
  compare.oneToOne = on;
  $("compare-zoom").setAttribute("aria-pressed", String(on));
  layoutCompare();
}

// Frames per second and frame count of the clips (both sides have the output's frames).
function compareClock() {
  const job = compare.job;
  const media = job && ((job.output && job.output.media) || (job.input && job.input.media));
  const fps = media && isNum(media.fps) && media.fps > 0 ? media.fps : null;
  const duration = $("compare-after").duration;
  const frames = media && isNum(media.frames) ? media.frames : fps && isNum(duration) ? Math.round(duration * fps) : null;
  return { fps, frames };
}

function pauseBoth() {
  $("compare-after").pause();
  $("compare-before").pause();
  $("compare-play").textContent = "Play";
}

// The videos loop: Chromium takes a seek to a looping video's very end (or a second seek to where it
// already is on its last frame) for the loop's wrap and shows the first frame. So the latest time
// sought is the middle of the last frame, and a seek to where the video already is is not made.
function lastFrameMiddle() {
  const { fps, frames } = compareClock();
  const duration = $("compare-after").duration;
  if (fps && isNum(frames) && frames > 0) return (frames - 0.5) / fps;
  return isNum(duration) ? Math.max(0, duration - 0.001) : 0;
}

function seekBoth(seconds) {
  const after = $("compare-after");
  const at = Math.max(0, Math.min(lastFrameMiddle(), seconds));
  if (at === after.currentTime) return;
  after.currentTime = at;
  $("compare-before").currentTime = at;
  showPosition();
}

// One frame on or back, both videos paused on it. A frame is sought at its middle, so that rounding
// of the time never shows its neighbour.
function stepFrame(by) {
  const { fps, frames } = compareClock();
  if (!fps) return;
  pauseBoth();
  const current = Math.floor($("compare-after").currentTime * fps + 1e-6);
  const last = isNum(frames) && frames > 0 ? frames - 1 : current + 1;
  const next = Math.max(0, Math.min(last, current + by));
  if (next !== current) seekBoth((next + 0.5) / fps);
}

function showPosition() {
  const at = $("compare-after").currentTime;
  const seek = $("compare-seek");
  if (!seek.matches(":active")) seek.value = String(at);
  const { fps, frames } = compareClock();
  const frame = fps ? `frame ${Math.floor(at * fps + 1e-6) + 1}${isNum(frames) ? ` / ${frames}` : ""} · ` : "";
  $("compare-time").textContent = `${frame}${at.toFixed(3)} s`;
}

export function setupCompare() {
  const before = $("compare-before");
  const after = $("compare-after");
  $("compare-split").addEventListener("input", (e) => setSplit(e.target.value));
  $("compare-close").addEventListener("click", closeCompare);
  // `close` (Escape, the close button) is fired a task after the dialog shut: by then the view may be
  // open again on another job, which that late event must leave alone.
  $("compare").addEventListener("close", () => { if (!$("compare").open) closeCompare(); });
  $("compare-play").addEventListener("click", () => {
    if (after.paused) {
      followLeader();
      Promise.all([after.play(), before.play()]).catch(() => {});
      $("compare-play").textContent = "Pause";
    } else {
      pauseBoth(); followLeader();
    }
  });
  $("compare-seek").addEventListener("input", (e) => seekBoth(Number(e.target.value)));
  $("compare-prev").addEventListener("click", () => stepFrame(-1));
  $("compare-next").addEventListener("click", () => stepFrame(1));
  $("compare-zoom").addEventListener("click", () => setOneToOne(!compare.oneToOne));
  window.addEventListener("resize", () => { if ($("compare").open) layoutCompare(); });
  after.addEventListener("loadedmetadata", () => {
    $("compare-seek").max = String(after.duration || 0);
    layoutCompare();
    showPosition();
  });
  after.addEventListener("seeked", () => { followLeader(); showPosition(); });
  after.addEventListener("timeupdate", () => { followLeader(); showPosition(); });
  const ready = () => {
    if (before.readyState >= 2 && after.readyState >= 2) $("compare-status").textContent = `${after.videoWidth}×${after.videoHeight}`;
  };
  for (const v of [before, after]) {
    v.addEventListener("loadeddata", ready);
    v.addEventListener("error", () => { if (v.getAttribute("src")) $("compare-status").textContent = "this preview cannot be shown"; });
  }
  // Dragging across the picture moves the split too.
  const stage = $("compare-stage");
  const fromPointer = (e) => {
    const r = $("compare-frame").getBoundingClientRect();
    if (r.width > 0) setSplit(((e.clientX - r.left) / r.width) * 100);
  };
  stage.addEventListener("pointerdown", (e) => { stage.setPointerCapture(e.pointerId); fromPointer(e); });
  stage.addEventListener("pointermove", (e) => { if (stage.hasPointerCapture(e.pointerId)) fromPointer(e); });
  window.addEventListener("hashchange", compareFromHash);
}

// `#compare=<job id>&split=<percent>` opens the view at once (a shared link, a reload); an address
// without it closes the view.
export function compareFromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const id = params.get("compare");
  if (!id) {
    if ($("compare").open) closeCompare();
    return;
  }
  if (id === compare.id && $("compare").open) return;
  const split = params.has("split") ? Number(params.get("split")) : undefined;
  openCompare(id, Number.isFinite(split) ? split : undefined);
}
