// Errors and toasts: an error as nodes, shown in a box or as a passing toast.

import { $, h } from "./dom.js";

export function errorNode(err) {
  const status = err.status ? ` (HTTP ${err.status})` : "";
  return [h("code", { class: "err-code", text: err.code || "error" }), " ", err.message || "", h("span", { class: "muted", text: status })];
}

export function showError(box, err) {
  if (!err) { box.hidden = true; box.replaceChildren(); return; }
  box.replaceChildren(...errorNode(err));
  box.hidden = false;
}

let toastTimer = null;
export function toast(content, isError) {
  const t = $("toast");
  t.replaceChildren(...(Array.isArray(content) ? content : [content]));
  t.classList.toggle("toast-error", !!isError);
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 3500);
}
