// The box's presets: the Preset select and what choosing one puts in the form.

import { $, setOptions } from "./dom.js";
import { api } from "./api.js";
import { state } from "./state.js";
import { onOpChange, onScaleChange } from "./form-choices.js";

// The box's presets (config.toml's [presets.NAME]): the select shows only when there are some.
export async function loadPresets() {
  try {
    const data = await api("GET", "/v1/presets");
    state.presets = data && typeof data.presets === "object" && data.presets ? data.presets : {};
  } catch (e) {
    state.presets = {};
  }
  const names = Object.keys(state.presets);
  setOptions($("preset"), [{ value: "", label: "none" }, ...names.map((n) => ({ value: n, label: n }))], "");
  $("preset-field").hidden = names.length === 0;
  $("preset-help").hidden = names.length === 0;
}

// Puts a preset's fields into the form: the op and model first (they decide which fields show), then the rest
// by their field names; a rate goes to the Frames select (`factor`) or its typed rate (`fps`).
export function applyPreset(name) {
  const fields = (state.presets || {})[name];
  if (!fields) return;
  if (fields.op && [...$("op").options].some((o) => o.value === fields.op)) $("op").value = fields.op;
  onOpChange({ op: $("op").value, model: fields.model });
  for (const [key, value] of Object.entries(fields)) {
    if (key === "op" || key === "model") continue;
    if (key === "fps") { $("rate").value = "fps"; $("fps").value = value; continue; }
    const el = key === "factor" ? $("rate") : $("job-form").querySelector(`[name="${key}"]`);
    if (el) el.value = value;
  }
  onScaleChange();
}
