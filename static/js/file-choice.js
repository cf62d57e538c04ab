// The chosen files: the file input and the drop zone, and what the files say about the op and format.
// Several files make one job each, with the same settings (upload.js).

import { $, h } from "./dom.js";
import { fmtBytes } from "./format.js";
import { showError } from "./notices.js";
import { state } from "./state.js";
import { LATENT_RE, checkFileOp, isStill, onOpChange, updateSubmit } from "./form-choices.js";
import { estimateSoon } from "./form-estimate.js";

// A still is written as PNG (png or png16): the video formats, which the box would refuse, are hidden.
// With stills and videos chosen together the box's default is kept, which fits each.
function offerStillFormats(files) {
  const still = files.length > 0 && files.some(isStill);
  const select = $("output-format");
  for (const option of select.options) {
    if (["h264", "h265", "prores", "ffv1"].includes(option.value)) option.hidden = still;
  }
  if (still && select.selectedOptions[0] && select.selectedOptions[0].hidden) select.value = "";
}

// "clip.mp4 6.4 KiB", or for several "3 files, 19 KiB: a.mp4, b.mp4, c.mp4 (one job each)".
function describe(files) {
  const total = files.reduce((sum, f) => sum + f.size, 0);
  if (files.length === 1) return [h("strong", { text: files[0].name }), " ", h("span", { class: "muted", text: fmtBytes(total) })];
  return [h("strong", { text: `${files.length} files` }), " ", h("span", { class: "muted", text: fmtBytes(total) }), ": ",
    files.map((f) => f.name).join(", "), " ", h("span", { class: "muted", text: "(one job each)" })];
}

function setFiles(files) {
  state.files = files;
  const info = $("file-info");
  if (files.length) {
    info.replaceChildren(...describe(files));
    info.hidden = false;
    $("dropzone").classList.add("has-file");
    // Pick a sensible op for the files' kind if the current one doesn't fit: VAE decode when all are latents.
    const op = $("op");
    const latent = files.every((f) => LATENT_RE.test(f.name));
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
  offerStillFormats(files);
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
    const files = [...(e.dataTransfer.files || [])];
    if (files.length && !state.xhr) setFiles(files);
  });
  dz.addEventListener("dragenter", (e) => { if (hasFiles(e)) { depth++; dz.classList.add("dragging"); } });
  dz.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) dz.classList.remove("dragging"); });
  dz.addEventListener("dragover", (e) => { if (hasFiles(e)) { e.preventDefault(); e.dataTransfer.dropEffect = "copy"; } });
  $("file").addEventListener("change", (e) => setFiles([...(e.target.files || [])]));
}
