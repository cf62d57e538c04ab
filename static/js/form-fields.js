// What the form sends: the op's fields, checked where the page can before the file is uploaded.

import { $ } from "./dom.js";
import { ApiError } from "./api.js";
import { showError } from "./notices.js";
import { savePrefs } from "./form-prefs.js";
import { currentModel, isFlashVsr, showAllSettings } from "./form-choices.js";

// The form's fields as [name, value] pairs, checked as far as the page can; null after showing why not.
export function formEntries() {
  try {
    const entries = checkedEntries();
    savePrefs();
    return entries;
  } catch (e) {
    showError($("form-error"), e);
    if (e.field && $("restore-advanced").contains(e.field)) $("restore-advanced").open = true;
    // A narrow screen's form may have the field among the settings it does not show.
    if (e.field && !e.field.getClientRects().length) showAllSettings(true);
    if (e.field) e.field.focus();
    return null;
  }
}

// The same pairs, or an ApiError (with the `field` to fix) where the page can tell they are wrong.
export function checkedEntries() {
  const prio = $("priority").value.trim() === "" ? 0 : Number($("priority").value);
  if (!Number.isInteger(prio)) throw fieldError("priority", "Priority must be an integer.", "invalid-priority");
  const op = $("op").value;
  let opFields = [];
  if (op === "upscale") opFields = [["scale", $("scale").value]];
  else if (op === "restore") opFields = restoreFields();
  else if (op === "interpolate") opFields = interpolateFields();
  const entries = [["op", op], ["model", $("model").value], ...opFields, ["priority", String(prio)], ["dtype", $("dtype").value]];
  if (op !== "vae_encode" && $("output-format").value) entries.push(["output_format", $("output-format").value]);
  if (op !== "vae_encode") entries.push(...encoderFields());
  const callback = $("callback-url").value.trim();
  if (callback) entries.push(["callback_url", callback]);
  return entries;
}

// The x264/x265 quality and speed, when given: only an H.264 or H.265 result (or the box's default) takes them.
function encoderFields() {
  const fields = [];
  const crf = wholeNumber("crf", "Quality (crf)", 0);
  if (crf !== null && crf > 51) throw fieldError("crf", "Quality (crf) must be from 0 to 51.");
  if (crf !== null) fields.push(["crf", crf]);
  if ($("encoder-preset").value) fields.push(["encoder_preset", $("encoder-preset").value]);
  const format = $("output-format").value;
  if (fields.length && format && format !== "h264" && format !== "h265") {
    throw fieldError(crf !== null ? "crf" : "encoder-preset", "Quality and encoder speed are for H.264 and H.265 results.", "parameter-not-for-output-format");
  }
  return fields;
}

// A restore field the user left empty is not sent: the server's default applies, and a field it does
// not know would be refused. Checks that need no server are made here so the file is not uploaded in vain.
function restoreFields() {
  const dit = currentModel();
  if (isFlashVsr(dit)) return flashVsrFields();
  const fields = [];
  const vae = $("vae").value;
  if (vae && !(dit && dit.pairs_with === vae)) fields.push(["vae", vae]);
  if ($("scale").value === "size") {
    const height = wholeNumber("height", "Height", 16), width = wholeNumber("width", "Width", 16);
    if (height === null || width === null) throw fieldError(height === null ? "height" : "width", "Give both height and width.");
    fields.push(["height", height], ["width", width]);
  } else {
    fields.push(["scale", $("scale").value]);
  }
  fields.push(...seedAndColorFields());
  const frames = wholeNumber("batch-frames", "Batch frames", 1);
  if (frames !== null && (frames - 1) % 4 !== 0) throw fieldError("batch-frames", "Batch frames must be 4n + 1 (1, 5, 9, 13, …).");
  if (frames !== null) fields.push(["batch_frames", frames]);
  const overlap = wholeNumber("batch-overlap", "Overlap", 0);
  const maxOverlap = (frames === null ? 21 : frames) - 1;
  if (overlap !== null && overlap > maxOverlap) {
    throw fieldError("batch-overlap", `Overlap must be at most ${maxOverlap} (batch frames − 1).`);
  }
  if (overlap !== null) fields.push(["batch_overlap", overlap]);
  const resolution = wholeNumber("resolution", "Short side", 16);
  if (resolution !== null) {
    if (fields.some(([k]) => k === "height")) throw fieldError("resolution", "Give a short side or a height × width, not both.");
    const at = fields.findIndex(([k]) => k === "scale");
    if (at >= 0) fields.splice(at, 1); // the short side replaces the scale
    fields.push(["resolution", resolution]);
  }
  const maxResolution = wholeNumber("max-resolution", "Long side at most", 16);
  if (maxResolution !== null) {
    if (resolution === null) throw fieldError("max-resolution", "A cap on the long side goes with a short side.");
    fields.push(["max_resolution", maxResolution]);
  }
  if ($("fit").value) fields.push(["fit", $("fit").value]);
  for (const [id, name, label] of [["input-noise-scale", "input_noise_scale", "Input noise"], ["latent-noise-scale", "latent_noise_scale", "Latent noise"]]) {
    const raw = $(id).value.trim();
    if (raw === "") continue;
    const value = Number(raw);
    if (!(value >= 0 && value <= 1)) throw fieldError(id, `${label}: a number from 0 to 1.`);
    fields.push([name, raw]);
  }
  const prepend = wholeNumber("prepend-frames", "Prepend frames", 0);
  if (prepend !== null) fields.push(["prepend_frames", prepend]);
  if ($("uniform-batches").value) fields.push(["uniform_batches", $("uniform-batches").value]);
  fields.push(...sceneThresholdField());
  return fields.map(([k, v]) => [k, String(v)]);
}

// A FlashVSR model's fields: its decoder (none: its own TCDecoder), ×4, and the seed, colour fix and fit when
// given. SeedVR2's (hidden for it) are not sent, whatever they hold: the box refuses them for FlashVSR.
function flashVsrFields() {
  const fields = [];
  if ($("vae").value) fields.push(["vae", $("vae").value]);
  fields.push(["scale", $("scale").value], ...seedAndColorFields());
  if ($("fit").value) fields.push(["fit", $("fit").value]);
  return fields.map(([k, v]) => [k, String(v)]);
}

function seedAndColorFields() {
  const fields = [];
  const seed = wholeNumber("seed", "Seed", Number.MIN_SAFE_INTEGER);
  if (seed !== null) fields.push(["seed", seed]);
  if ($("color-fix").value) fields.push(["color_fix", $("color-fix").value]);
  return fields;
}

// The rate (a factor, or a frame rate typed in) and the scene-cut threshold when one is given.
// Scene cuts, for interpolate and restore alike; empty sends nothing (the box's default).
function sceneThresholdField(code) {
  const threshold = $("scene-threshold").value.trim();
  if (threshold === "") return [];
  const value = Number(threshold);
  if (!(value >= 0 && value <= 1)) throw fieldError("scene-threshold", "Scene cuts: a number from 0 (off) to 1.", code);
  return [["scene_threshold", threshold]];
}

function interpolateFields() {
  const fields = [];
  if ($("rate").value === "fps") {
    const fps = $("fps").value.trim();
    if (!/^\d+(\.\d+)?(\/\d+)?$/.test(fps)) throw fieldError("fps", "Give the frame rate as 60, 59.94 or 60000/1001.", "invalid-interpolate-parameter");
    fields.push(["fps", fps]);
  } else {
    fields.push(["factor", $("rate").value]);
  }
  fields.push(...sceneThresholdField("invalid-interpolate-parameter"));
  return fields;
}

function fieldError(id, message, code = "invalid-restore-parameter") {
  const e = new ApiError(0, code, message);
  e.field = $(id);
  return e;
}

// null when empty; a typed non-number (the input's badInput) is an error, not an empty field.
function wholeNumber(id, name, min) {
  const input = $(id);
  const raw = input.value.trim();
  if (raw === "" && !(input.validity && input.validity.badInput)) return null;
  const n = Number(raw);
  if (raw === "" || !Number.isSafeInteger(n) || n < min) {
    throw fieldError(id, `${name} must be a whole number${min > Number.MIN_SAFE_INTEGER ? ` of at least ${min}` : ""}.`);
  }
  return n;
}
