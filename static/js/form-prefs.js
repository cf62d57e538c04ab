// The form's last choices (op, model, scale, …), kept in this browser.

import { $ } from "./dom.js";

const PREFS_KEY = "vaebox.form";

export function loadPrefs() {
  try { return JSON.parse(localStorage.getItem(PREFS_KEY)) || {}; } catch (_) { return {}; }
}
export function savePrefs() {
  try {
    localStorage.setItem(PREFS_KEY, JSON.stringify({
      op: $("op").value, model: $("model").value, scale: $("scale").value,
      dtype: $("dtype").value, priority: $("priority").value, color_fix: $("color-fix").value,
    }));
  } catch (_) { /* storage disabled */ }
}
