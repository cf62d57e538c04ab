// The form's selects: ops and models from /v1/models, and the scale, precision and VAE each allows;
// which fields show for the op and restore model (and, on a narrow screen, whether all of them do); whether
// the chosen files fit the op; whether the form can be sent, and tried first.

import { $, h, setOptions } from "./dom.js";
import { api } from "./api.js";
import { showError } from "./notices.js";
import { state } from "./state.js";
import { loadPrefs } from "./form-prefs.js";

export const LATENT_RE = /\.(safetensors|latent)$/i;
// A still picture (one frame): written as PNG only, and with no first seconds to try.
const STILL_RE = /\.(png|jpe?g|webp)$/i;
export function isStill(file) { return STILL_RE.test(file.name) || /^image\/(png|jpeg|webp)$/.test(file.type || ""); }
const OP_LABELS = {
  upscale: "Upscale",
  vae_encode: "VAE encode (video → latent)",
  vae_decode: "VAE decode (latent → video)",
  vae_reconstruct: "VAE reconstruct (video → video)",
  restore: "Restore (SeedVR2 or FlashVSR, video → video)",
  interpolate: "Interpolate (RIFE, more frames per second)",
};

const SEEDVR2_VAE_FAMILY = "seedvr2";
// A FlashVSR model (a `restore` model of this family) is ×4 only and decodes with its own TCDecoder ("Tiny")
// or a Wan 2.1 VAE of the box ("Full"); the box refuses SeedVR2's sizes, batches, noise and scene cuts for it.
const FLASHVSR_FAMILY = "flashvsr";
const WAN21_VAE_FAMILY = "wan21";

export function isFlashVsr(model) {
  return !!model && model.family === FLASHVSR_FAMILY;
}

// FlashVSR's choices where they differ from SeedVR2's (index.html's); the first of each is the box's default,
// sent as nothing.
const FLASHVSR_CHOICES = {
  vaeLabel: "Decoder",
  seed: "0",
  colorFix: [{ value: "", label: "AdaIN (default)" }, { value: "none", label: "none" }],
  fit: [{ value: "", label: "pad (default)" }, { value: "crop", label: "crop" }],
  fitHelp: "The model works on multiples of 128: pad keeps the whole picture (edge pixels added, removed after), crop keeps the centre.",
};
let seedvr2Choices = null; // index.html's, read before they are first replaced

function restoreChoices(flashvsr) {
  const optionsOf = (select) => [...select.options].map((o) => ({ value: o.value, label: o.text }));
  seedvr2Choices = seedvr2Choices || {
    vaeLabel: $("vae-label").textContent, seed: $("seed").placeholder, colorFix: optionsOf($("color-fix")),
    fit: optionsOf($("fit")), fitHelp: $("fit-help").textContent,
  };
  return flashvsr ? FLASHVSR_CHOICES : seedvr2Choices;
}

export async function loadModels() {
  const formErr = $("form-error");
  try {
    const data = await api("GET", "/v1/models");
    state.models = Array.isArray(data && data.models) ? data.models : [];
    showError(formErr, null);
  } catch (e) {
    state.models = [];
    showError(formErr, e);
    formErr.append(" ", h("button", { type: "button", class: "link", onclick: loadModels, text: "Retry" }));
  }
  // `/?op=restore&model=…` opens the form on that choice (a link to share, or a bookmark).
  const prefs = { ...loadPrefs(), ...presetFromUrl() };
  const ops = [];
  for (const m of state.models) for (const op of m.ops || []) if (!ops.includes(op)) ops.push(op);
  const op = $("op");
  if (ops.length === 0) {
    op.replaceChildren(h("option", { text: state.models.length ? "no operations" : "no models" }));
    op.disabled = true;
    $("model").replaceChildren(h("option", { text: "—" }));
    $("model").disabled = true;
    updateSubmit();
    return;
  }
  op.disabled = false;
  setOptions(op, ops.map((o) => ({ value: o, label: OP_LABELS[o] || o })), prefs.op);
  if (prefs.priority !== undefined && prefs.priority !== "") $("priority").value = prefs.priority;
  const colorFix = $("color-fix");
  if ([...colorFix.options].some((o) => o.value === prefs.color_fix)) colorFix.value = prefs.color_fix;
  onOpChange(prefs);
}

function presetFromUrl() {
  const q = new URLSearchParams(location.search);
  const preset = {};
  for (const k of ["op", "model"]) if (q.get(k)) preset[k] = q.get(k);
  return preset;
}

export function currentModel() {
  return state.models.find((m) => m.name === $("model").value) || null;
}

export function onOpChange(prefs) {
  prefs = prefs && prefs.op !== undefined ? prefs : {};
  const op = $("op").value;
  const models = state.models.filter((m) => (m.ops || []).includes(op));
  const sel = $("model");
  sel.disabled = models.length === 0;
  setOptions(sel, models.map((m) => ({
    value: m.name,
    label: m.present === false ? `${m.name} (not installed)` : m.name,
    disabled: m.present === false,
  })), prefs.model);
  onModelChange(prefs);
}

export function onModelChange(prefs) {
  prefs = prefs && prefs.op !== undefined ? prefs : {};
  const m = currentModel();
  const op = $("op").value;
  $("model-desc").textContent = !m ? (state.models.length ? "No model offers this operation." : "")
    : m.present === false ? `Not installed on the server. ${m.description || ""}` : (m.description || "");
  const restore = op === "restore";
  const flashvsr = restore && isFlashVsr(m);
  for (const el of document.querySelectorAll("#job-form [data-ops]")) el.hidden = !el.dataset.ops.split(" ").includes(op);
  for (const el of document.querySelectorAll("#job-form [data-seedvr2-only]")) if (flashvsr || !el.dataset.ops) el.hidden = flashvsr;
  $("scale").disabled = $("scale-field").hidden;
  const scales = m && Array.isArray(m.scales) && m.scales.length ? m.scales : restore ? [1, 2, 3, 4] : [2, 4];
  // Each op starts on the server's own default scale, not on the one the previous op left behind.
  const opChanged = $("scale").dataset.op !== op;
  $("scale").dataset.op = op;
  const choices = scales.map((s) => ({ value: s, label: `×${s}` }));
  if (restore && !flashvsr) choices.push({ value: "size", label: "height × width…" });
  const saved = prefs.scale !== undefined && choices.some((c) => String(c.value) === String(prefs.scale));
  setOptions($("scale"), choices, saved ? prefs.scale : opChanged ? (restore ? 2 : Math.max(...scales)) : undefined);
  if (restore) fillRestoreChoices(m, prefs);
  onScaleChange();
  const dtypes = m && Array.isArray(m.dtypes) && m.dtypes.length ? m.dtypes : ["f32", "bf16"];
  setOptions($("dtype"), [{ value: "auto", label: "auto" }, ...dtypes.map((d) => ({ value: d, label: d }))],
    prefs.dtype !== undefined ? prefs.dtype : undefined);
  checkFileOp();
  updateSubmit();
}

export function onScaleChange() {
  const bySize = !$("scale-field").hidden && $("scale").value === "size";
  $("size-field").hidden = !bySize;
  $("size-help").hidden = !bySize;
  $("fps-field").hidden = $("rate-field").hidden || $("rate").value !== "fps";
}

// The VAE (a FlashVSR model's decoder), seed, colour fix and fit as the restore model's family has them.
function fillRestoreChoices(m, prefs) {
  const flashvsr = isFlashVsr(m);
  const choices = restoreChoices(flashvsr);
  $("vae-label").textContent = choices.vaeLabel;
  $("seed").placeholder = choices.seed;
  setOptions($("color-fix"), choices.colorFix, prefs.color_fix);
  setOptions($("fit"), choices.fit);
  $("fit-help").textContent = choices.fitHelp;
  if (flashvsr) fillDecoders(prefs.vae);
  else fillVaes(m, prefs.vae);
}

// A FlashVSR model's decoders: its own TCDecoder (the server's default when no `vae` is sent), then the box's
// Wan 2.1 VAEs.
function fillDecoders(preferred) {
  const vaes = state.models.filter((m) => m.family === WAN21_VAE_FAMILY);
  const sel = $("vae");
  sel.disabled = false;
  setOptions(sel, [{ value: "", label: "TCDecoder (Tiny, the model's own)" }, ...vaes.map((v) => ({
    value: v.name, label: `${v.name} (Full)${v.present === false ? " (not installed)" : ""}`, disabled: v.present === false,
  }))], preferred);
  $("vae-help").textContent = vaes.length ? "Full: a Wan 2.1 VAE decodes, slower and sharper than Tiny."
    : "Put a Wan 2.1 VAE in the models folder's vae/ to decode with it (Full).";
}

// The SeedVR2 VAEs, the DiT's own first (the server's default when no `vae` is sent).
function fillVaes(dit, preferred) {
  const vaes = state.models.filter((m) => m.family === SEEDVR2_VAE_FAMILY);
  const pairs = dit && dit.pairs_with;
  vaes.sort((a, b) => (b.name === pairs) - (a.name === pairs));
  const sel = $("vae");
  sel.disabled = vaes.length === 0;
  if (!vaes.length) sel.replaceChildren(h("option", { value: "", text: "none installed" }));
  else setOptions(sel, vaes.map((v) => ({
    value: v.name,
    label: `${v.name}${v.name === pairs ? " (default)" : ""}${v.present === false ? " (not installed)" : ""}`,
    disabled: v.present === false,
  })), preferred !== undefined ? preferred : pairs || undefined);
  $("vae-help").textContent = vaes.length ? "" : "Put a SeedVR2 VAE in the models folder's vae/ to restore.";
}

// "… (b.mp4 and 2 more)" after a message about some of several files; nothing when one file is chosen.
function naming(files) {
  if (state.files.length < 2 || !files.length) return "";
  return ` (${files[0].name}${files.length > 1 ? ` and ${files.length - 1} more` : ""})`;
}

// A warning when a chosen file does not fit the op: a video to VAE-decode, a latent to anything else.
export function checkFileOp() {
  const warn = $("file-warning");
  const op = $("op").value;
  const latents = state.files.filter((f) => LATENT_RE.test(f.name));
  const others = state.files.filter((f) => !LATENT_RE.test(f.name));
  let msg = "";
  if (op === "vae_decode" && others.length) msg = `VAE decode expects a latent file (.safetensors / .latent)${naming(others)}.`;
  else if (op !== "vae_decode" && latents.length) msg = `This looks like a latent file${naming(latents)}; choose “VAE decode”.`;
  warn.textContent = msg;
  warn.hidden = !msg;
}

// Why Try first cannot run with this op and these files ("" when it can): the box would refuse it.
function whyNoTry() {
  if ($("op").value === "vae_decode") return "A latent is decoded whole: there is no first part of it to try.";
  const still = state.files.find(isStill);
  if (still) return `${still.name} is a still picture (one frame): there is no first part of it to try. Upload & queue runs it whole.`;
  return "";
}

export function updateSubmit() {
  const m = currentModel();
  const busy = !!state.xhr;
  const noVae = $("op").value === "restore" && !$("vae").value && !isFlashVsr(m);
  $("submit").disabled = busy || !state.files.length || !m || m.present === false || noVae;
  // A disabled button shows no reason by itself: the reason is its title (on the button and around it, as a
  // disabled button gets no pointer) and, once files are chosen, a line under the buttons.
  const why = whyNoTry();
  $("try-first").disabled = $("submit").disabled || !!why;
  for (const el of [$("try-first"), $("try-first").parentElement]) el.title = why;
  $("try-first-note").textContent = why;
  $("try-first-note").hidden = !why || !state.files.length;
  $("abort").hidden = !busy;
}

// On a narrow screen (the form above the jobs, style.css) the form shows its main choices only, so that the
// job list is within reach; "All settings" shows the rest. A field with something to fix opens them (form-fields.js).
export function showAllSettings(all) {
  $("job-form").classList.toggle("all-settings", all);
  $("all-settings").setAttribute("aria-expanded", String(all));
  $("all-settings").textContent = all ? "Fewer settings" : "All settings";
}
