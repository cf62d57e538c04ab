// A card's plan in words: tiles, batches, a restore's stages (SeedVR2) or its streaming run (FlashVSR), an
// interpolation's rates.

import { h, kvTable } from "./dom.js";
import { DASH, fmtBytes, isNum } from "./format.js";

// `row_split` is `{max_band_bytes}` or, for a reconstruct, `{encoder, decoder}` of those; null parts ran unsplit.
function rowSplitText(rs) {
  const band = (v) => (v && isNum(v.max_band_bytes) ? `row bands of ≤ ${fmtBytes(v.max_band_bytes)}` : null);
  if (!rs || typeof rs !== "object") return null;
  if ("max_band_bytes" in rs) return band(rs);
  const parts = ["encoder", "decoder"].filter((k) => band(rs[k])).map((k) => `${k}: ${band(rs[k])}`);
  return parts.length ? parts.join(" · ") : null;
}

const PLAN_LABELS = {
  tile: "Tile", overlap: "Overlap", chunk_frames: "Chunk frames", notes: "Notes",
  batches: "Batches", output: "Output", resize: "Resized to", frames: "Frames", seed: "Seed", color_fix: "Colour fix",
  dit: "DiT", latent_grid: "Latent grid", spatial_tiles: "Spatial tiles", dit_tiles: "DiT tiles",
  input_fps: "Input rate", output_fps: "Output rate", input_frames: "Input frames", interpolated: "Made by the model",
  scene_cuts: "Scene cuts at input frames", scene_threshold: "Scene-cut threshold", flow_scale: "Motion estimated at",
  pairs_per_call: "Frame pairs per call", resumed_from: "Resumed", frame_by_frame: "Frame by frame",
  // A restore's front-end options (the form's Advanced fields), in the words the form uses.
  fit: "Fit", padding: "Padding", prepend_frames: "Mirrored lead frames", input_noise_scale: "Input noise",
  latent_noise_scale: "Latent noise", uniform_batches: "Last batch",
  // A FlashVSR restore's (src/jobs/plan/flashvsr.rs); its `vae` goes in the Decoder row.
  flashvsr_release: "FlashVSR release", decoder: "Decoder", attention: "Attention", padded_frames: "Padded frames",
  steps: "DiT steps", model_size: "Model's size", tiles: "Tiles", estimated_peak_bytes: "Memory per step (estimate)",
  memory_budget_mib: "Memory budget", fits_budget: "Fits the budget", model_weight_bytes: "Model weights",
};
// Restore plans say how the frames were batched and sized; their batch_frames/overlap go in the Batches row.
const PLAN_ORDER = ["tile", "overlap", "chunk_frames", "batches", "output", "resize", "frames", "seed", "color_fix", "dit", "notes"];
const PLAN_FOLDED = ["fallbacks", "row_split", "batch_frames", "batch_overlap"];
const FLASHVSR_ORDER = ["flashvsr_release", "decoder", "output", "model_size", "fit", "input_frames", "frames", "padded_frames", "steps",
  "seed", "color_fix", "model_weight_bytes", "attention", "tiles", "estimated_peak_bytes", "memory_budget_mib", "fits_budget", "resumed_from"];
const FLASHVSR_FOLDED = ["vae", "dit_weight_bytes"];

// `60000/1001` → `59.94 fps`.
function fpsText(rational) {
  const [num, den] = String(rational).split("/").map(Number);
  const fps = num / (den || 1);
  return Number.isFinite(fps) ? `${Number(fps.toFixed(2))} fps` : String(rational);
}

const hwText = (hw) => (Array.isArray(hw) && hw.length === 2 ? `${hw[1]}×${hw[0]}` : null);

function tilesText(spatial) {
  if (!spatial || typeof spatial !== "object") return "whole frames";
  return `${spatial.tile_width_latent}×${spatial.tile_height_latent} latent cells, ${spatial.overlap_latent} overlap`;
}

// The DiT's own spatial tiles (a frame too large for it in one piece): `{rows, cols, tile, overlap}`.
function ditTilesText(t) {
  if (!t || typeof t !== "object" || !Array.isArray(t.tile)) return "whole latent";
  return `${t.rows}×${t.cols} tiles of ${t.tile[1]}×${t.tile[0]} latent cells, ${t.overlap} overlap`;
}

function planValue(k, v, pl) {
  if (v === null || v === undefined) return DASH;
  if ((k === "tile" || k === "overlap") && isNum(v)) return `${v} px`;
  if (k === "batches" && isNum(v)) {
    const of = isNum(pl.batch_frames) ? ` of ≤ ${pl.batch_frames} frames` : "";
    return `${v}${of}${isNum(pl.batch_overlap) ? `, ${pl.batch_overlap} shared between batches` : ""}`;
  }
  if ((k === "output" || k === "resize") && hwText(v)) return `${hwText(v)} px`;
  if (k === "input_fps" || k === "output_fps") return fpsText(v);
  if (k === "scene_cuts" && Array.isArray(v)) return v.length ? v.join(", ") : "none";
  if (k === "scene_threshold" && v === 0) return "0 (detection off)";
  if (k === "flow_scale" && isNum(v)) return v === 1 ? "full resolution" : `${v}× resolution`;
  if (k === "latent_grid" && Array.isArray(v)) return v.join(" × ");
  if (k === "spatial_tiles") return tilesText(v);
  if (k === "dit_tiles") return ditTilesText(v);
  if (k === "resumed_from" && typeof v === "object") return resumedText(v, isFlashVsrPlan(pl));
  if (isFlashVsrPlan(pl) && Object.hasOwn(FLASHVSR_TEXT, k)) return FLASHVSR_TEXT[k](v, pl);
  if (Object.hasOwn(RESTORE_OPTION_TEXT, k)) return RESTORE_OPTION_TEXT[k](v);
  if (k === "dit" && typeof v === "object") {
    return [v.variant ? String(v.variant).toUpperCase() : null, isNum(v.blocks) ? `${v.blocks} blocks` : null,
      isNum(v.dim) ? `width ${v.dim}` : null].filter(Boolean).join(" · ") || JSON.stringify(v);
  }
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

// A restore's options as the plan records them; 0 and false read as what they mean ("none"), not as numbers.
const noneOr = (v, text) => (v === 0 ? "none" : text);
const RESTORE_OPTION_TEXT = {
  fit: (v) => (v === "pad" ? "pad to multiples of 16 (the padding is cut off the output)" : v === "crop" ? "crop to multiples of 16" : String(v)),
  // `[rows, columns]` of edge copies added below and to the right.
  padding: (v) => (Array.isArray(v) && v.length === 2
    ? (v[0] || v[1] ? `${v[1]} px right, ${v[0]} px below` : "none") : JSON.stringify(v)),
  prepend_frames: (v) => noneOr(v, `${v} (run before the clip, dropped from the output)`),
  input_noise_scale: (v) => noneOr(v, String(v)),
  latent_noise_scale: (v) => noneOr(v, String(v)),
  uniform_batches: (v) => (v === true ? "padded to the batch length" : v === false ? "as long as it is" : String(v)),
};

const isFlashVsrPlan = (pl) => "flashvsr_release" in pl;

// A FlashVSR run's plan: the model's sides are multiples of 128 (SeedVR2's of 16); the first DiT step makes 21
// frames, each later one 8.
const FLASHVSR_TEXT = {
  decoder: (v, pl) => (v === "tiny" ? "Tiny (the model's own TCDecoder)" : v === "full" ? `Full (the Wan 2.1 VAE ${pl.vae || DASH})` : String(v)),
  model_size: (v) => (hwText(v) ? `${hwText(v)} px (multiples of 128)` : JSON.stringify(v)),
  fit: (v) => (v === "pad" ? "pad to multiples of 128 (the padding is cut off the output)"
    : v === "crop" ? "the centre, cropped to multiples of 128" : String(v)),
  padded_frames: (v) => noneOr(v, `${v} copies of the last frame (cut off the output)`),
  steps: (v) => `${v} (the first makes 21 frames, each later one 8)`,
  attention: (v) => (v === "block-sparse" ? "block-sparse (local masks over the cache)" : String(v)),
  // `{rows, cols, tile: [h, w], overlap}` in pixels at the model's size; absent for the whole frame.
  tiles: (v) => (v && Array.isArray(v.tile)
    ? `${v.rows}×${v.cols} tiles of ${v.tile[1]}×${v.tile[0]} px, ${v.overlap} px shared, each a run of its own` : "whole frame"),
  estimated_peak_bytes: (v) => (isNum(v) ? fmtBytes(v) : DASH),
  model_weight_bytes: (v, pl) => (isNum(v) ? `${fmtBytes(v)}${isNum(pl.dit_weight_bytes) ? `, the DiT's ${fmtBytes(pl.dit_weight_bytes)}` : ""}` : DASH),
  memory_budget_mib: (v) => (isNum(v) ? fmtBytes(v * 1048576) : "none"),
  fits_budget: (v, pl) => (!isNum(pl.memory_budget_mib) ? "no budget" : v === true ? "yes" : v === false ? "no" : DASH),
};

// A restore's plan per stage: one row each, what the planner chose for it in columns.
const RESTORE_STAGE_KEYS = ["dit", "vae", "spatial_tiles", "dit_tiles", "device_memory"];
const yesNo = (v) => (v === true ? "yes" : v === false ? "no" : DASH);

function restoreStagesTable(pl) {
  const vae = pl.vae || {};
  const memory = pl.device_memory || {};
  const batch = memory.estimated_batch_bytes || {};
  const dit = pl.dit || {};
  const budgeted = isNum(memory.budget_bytes);
  const fits = (v) => (budgeted ? yesNo(v) : "no budget");
  // 0: a stage the planner has no memory model for.
  const estimate = (bytes) => (isNum(bytes) && bytes > 0 ? fmtBytes(bytes) : "not estimated");
  const vaeRow = (stage, plan, bytes) => plan
    ? [stage, `${plan.latent_frames_per_chunk} latent frame${plan.latent_frames_per_chunk === 1 ? "" : "s"} per push${plan.tile_major ? ", tile by tile" : ""}`,
      tilesText(plan.spatial), estimate(bytes), fits(plan.fits)]
    : [stage, "not run", DASH, estimate(bytes), DASH];
  const placement = dit.block_placement === "swapped" ? `blocks swapped in from the host (${fmtBytes(dit.host_block_bytes)})`
    : dit.block_placement ? `blocks ${dit.block_placement}` : null;
  const rows = [
    vaeRow("VAE encode", vae.encode, batch.encode_bytes),
    ["DiT", [planValue("dit", pl.dit, pl), placement].filter(Boolean).join(" · "), ditTilesText(pl.dit_tiles),
      `${estimate(batch.dit_bytes)}${pl.dit_tiles ? " per tile" : ""} + ${fmtBytes(memory.dit_weight_bytes)} weights`, fits(memory.fits)],
    vaeRow("VAE decode", vae.decode, batch.decode_bytes),
  ];
  const columns = ["Stage", "Runs", "Tiles", "Memory per batch (estimate)", "Fits the budget"];
  return h("table", { class: "stages restore-stages" },
    h("caption", { class: "visually-hidden", text: "How each stage of the restore ran" }),
    h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col", text: c })))),
    h("tbody", null, rows.map(([stage, ...cells]) => h("tr", null, h("th", { scope: "row", text: stage }), cells.map((c) => h("td", { text: c }))))));
}

// A run that went on from a stopped one's checkpoint: where, and what that saved.
function resumedText(v, flashvsr) {
  const batch = isNum(v.batch) ? `${flashvsr ? "DiT step" : "batch"} ${v.batch + 1}, ` : "";
  const tiles = isNum(v.tiles) ? `${v.tiles} tile${v.tiles === 1 ? "" : "s"} spooled, ` : "";
  return `from ${batch}${tiles}frame ${v.frame} (${isNum(v.saved_s) ? `${v.saved_s.toFixed(1)} s` : DASH} of work kept)`;
}

export function planBlock(job) {
  const pl = job.plan;
  if (!pl || typeof pl !== "object") return null;
  if (isFlashVsrPlan(pl)) return flashVsrPlanBlock(pl);
  const restore = "batches" in pl;
  const interpolation = "interpolated" in pl;
  // Out-of-memory retries change how the job ran, so they come first and are counted in the summary;
  // when there were none they are left out rather than shown as an empty list.
  const fallbacks = Array.isArray(pl.fallbacks) ? pl.fallbacks : [];
  const rowSplit = rowSplitText(pl.row_split);
  const rows = [];
  if (fallbacks.length) {
    rows.push(["Out-of-memory fallbacks", h("ol", { class: "fallbacks" }, fallbacks.map((f) => h("li", { text: String(f) })))]);
  }
  if (rowSplit) rows.push(["Row split", `convolutions in ${rowSplit}`]);
  const folded = restore ? [...PLAN_FOLDED, ...RESTORE_STAGE_KEYS] : PLAN_FOLDED.slice(0, 2);
  const keys = [...PLAN_ORDER.filter((k) => k in pl && !folded.includes(k)), ...Object.keys(pl).filter((k) => !PLAN_ORDER.includes(k) && !folded.includes(k))]
    .filter((k) => !(restore && pl[k] === null)); // a restore plan's null means "not used" (e.g. no spatial tiles)
  rows.push(...keys.map((k) => [PLAN_LABELS[k] || k, planValue(k, pl[k], pl)]));
  if (restore && pl.device_memory) {
    const budget = pl.device_memory.budget_bytes;
    rows.push(["Device memory budget", isNum(budget) ? fmtBytes(budget) : "none"]);
  }
  const bits = [
    isNum(pl.tile) ? `${pl.tile}px tiles, ${isNum(pl.overlap) ? pl.overlap : DASH}px overlap` : null,
    restore && isNum(pl.batches) ? `${pl.batches} batch${pl.batches === 1 ? "" : "es"}` : null,
    restore && hwText(pl.output) ? `${hwText(pl.output)} out` : null,
    restore && pl.dit_tiles ? `DiT in ${ditTilesText(pl.dit_tiles)}` : null,
    interpolation ? `${fpsText(pl.input_fps)} → ${fpsText(pl.output_fps)}` : null,
    interpolation && isNum(pl.interpolated) ? `${pl.interpolated} frame${pl.interpolated === 1 ? "" : "s"} made` : null,
    Array.isArray(pl.scene_cuts) ? `${pl.scene_cuts.length} scene cut${pl.scene_cuts.length === 1 ? "" : "s"}` : null,
    fallbacks.length ? `${fallbacks.length} out-of-memory fallback${fallbacks.length === 1 ? "" : "s"}` : null,
    pl.resumed_from ? `resumed ${resumedText(pl.resumed_from)}` : null,
    rowSplit ? "row-split convolutions" : null,
  ].filter(Boolean);
  const title = restore ? "Restore plan" : interpolation ? "Interpolation plan" : "Tile plan";
  const table = restore ? h("div", { class: "plan-tables" }, kvTable(title, rows), restoreStagesTable(pl)) : kvTable(title, rows);
  return { key: "plan", summary: `${title}${bits.length ? ` — ${bits.join(" · ")}` : ""}`, table };
}

// A FlashVSR restore's plan: one table, its rows in FLASHVSR_ORDER and then any the page does not know yet.
function flashVsrPlanBlock(pl) {
  const keys = [...FLASHVSR_ORDER.filter((k) => k in pl), ...Object.keys(pl).filter((k) => !FLASHVSR_ORDER.includes(k) && !FLASHVSR_FOLDED.includes(k))];
  const rows = keys.map((k) => [PLAN_LABELS[k] || k, planValue(k, pl[k], pl)]);
  const decoder = { tiny: "Tiny", full: "Full" }[pl.decoder];
  const bits = [
    `FlashVSR ${pl.flashvsr_release}`,
    decoder ? `${decoder} decoder` : null,
    isNum(pl.steps) ? `${pl.steps} DiT step${pl.steps === 1 ? "" : "s"}` : null,
    hwText(pl.output) ? `${hwText(pl.output)} out` : null,
    pl.tiles ? `in ${pl.tiles.rows}×${pl.tiles.cols} tiles` : null,
    pl.resumed_from ? `resumed ${resumedText(pl.resumed_from, true)}` : null,
  ].filter(Boolean);
  return { key: "plan", summary: `Restore plan — ${bits.join(" · ")}`, table: kvTable("Restore plan", rows) };
}
