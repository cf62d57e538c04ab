// Building the page: `$` finds an element by id, `h` makes one with its attributes and children,
// `kvTable` a two-column table, `setOptions` fills a select.

export const $ = (id) => document.getElementById(id);

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k in el && typeof v !== "string") el[k] = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// Values are text or nodes.
export function kvTable(caption, rows) {
  return h("table", { class: "kv" },
    h("caption", { class: "visually-hidden", text: caption }),
    h("tbody", null, rows.map(([k, v]) => h("tr", null, h("th", { scope: "row", text: k }), h("td", null, v)))));
}

// A select's options `{value, label, disabled}`, keeping `preferred` (else the current value) chosen when it is
// one of them and enabled, else the first enabled.
export function setOptions(select, items, preferred) {
  const prev = preferred !== undefined ? preferred : select.value;
  select.replaceChildren(...items.map((it) => h("option", { value: it.value, disabled: it.disabled, text: it.label })));
  const enabled = items.filter((it) => !it.disabled);
  const pick = enabled.find((it) => String(it.value) === String(prev)) || enabled[0] || items[0];
  if (pick) select.value = String(pick.value);
}
