// The chosen file: the file input and the drop zone, and what the file says about the op and format.

import { $, h } from "./dom.js";
import { fmtBytes } from "./format.js";
import { showError } from "./notices.js";
import { state } from "./state.js";
import { LATENT_RE, onOpChange, updateSubmit } from "./form-choices.js";
import { estimateSoon } from "./form-estimate.js";

export function checkFileOp() {
  const warn = $("file-warning");
  const f = state.file;
  const op = $("op").value;
  let msg = "";
  if (f) {
    const latent = LATENT_RE.test(f.name);
    if (op === "vae_decode" && !latent) msg = "VAE decode expects a latent file (.safetensors / .latent).";
    else if (op !== "vae_decode" && latent) msg = "This looks like a latent file; choose “VAE decode”.";
  }
  warn.textContent = msg;
  warn.hidden = !msg;
}

// A still is written as PNG (png or png16): the video formats, which the box would refuse, are hidden.
const STILL_RE = /\.(png|jpe?g|webp)$/i;
function offerStillFormats(f) {
  const still = !!f && (STILL_RE.test(f.name) || /^image\/(png|jpeg|webp)$/.test(f.type || ""));
  const select = $("output-format");
  for (const option of select.options) {
    if (["h264", "h265", "prores", "ffv1"].includes(option.value)) option.hidden = still;
  }
  if (still && select.selectedOptions[0] && select.selectedOptions[0].hidden) select.value = "";
}

function setFile(f) {
  state.file = f || null;
  const info = $("file-info");
  if (f) {
    info.replaceChildren(h("strong", { text: f.name }), " ", h("span", { class: "muted", text: fmtBytes(f.size) }));
    info.hidden = false;
    $("dropzone").classList.add("has-file");
    // Pick a sensible op for the file kind if the current one doesn't fit.
    const op = $("op");
    const latent = LATENT_RE.test(f.name);
    const opts = [...op.options].map((o) => o.value);
    if (latent && op.value !== "vae_decode" && opts.includes("vae_decode")) {
      op.value = "vae_decode"; onOpChange();
    } else if (!latent && op.value === "vae_decode") {
      const alt = opts.find((o) => o !== "vae_decode");
      if (alt) { op.value = alt; onOpChange(); }
    }
  } else {
    info.hidden = true;
    $("dropzone").classList.remove("has-file");
  }
  offerStillFormats(f);
  showError($("form-error"), null);
  checkFileOp();
  updateSubmit();
  estimateSoon();
}

export function setupDrop() {
  const dz = $("dropzone");
  let depth = 0;
  const hasFiles = (e) => e.dataTransfer && [...(e.dataTransfer.types || [])].includes("Files");
  // Prevent the browser from navigating away when a file is dropped outside the zone.
  window.addEventListener("dragover", (e) => { if (hasFiles(e)) e.preventDefault(); });
  window.addEventListener("drop", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0; dz.classList.remove("dragging");
    const f = e.dataTransfer.files && e.dataTransfer.files[0];
    if (f && !state.xhr) setFile(f);
  });
  dz.addEventListener("dragenter", (e) => { if (hasFiles(e)) { depth++; dz.classList.add("dragging"); } });
  dz.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) dz.classList.remove("dragging"); });
  dz.addEventListener("dragover", (e) => { if (hasFiles(e)) { e.preventDefault(); e.dataTransfer.dropEffect = "copy"; } });
  $("file").addEventListener("change", (e) => setFile(e.target.files && e.target.files[0]));
}
