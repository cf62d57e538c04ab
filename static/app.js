// vaebox web UI — plain JS, no build step, no external resources.
"use strict";

(() => {
  const MAX_STREAMS = 4;        // browsers allow ~6 HTTP/1.1 connections per host; keep room for uploads/polls
  const POLL_MS = 3000;         // job list refresh
  const POLL_HIDDEN_MS = 15000; // when the tab is in the background
  const HEALTH_MS = 5000;
  const PAGE = 50;
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
  const LATENT_RE = /\.(safetensors|latent)$/i;
  const OP_LABELS = {
    upscale: "Upscale",
    vae_encode: "VAE encode (video → latent)",
    vae_decode: "VAE decode (latent → video)",
    vae_reconstruct: "VAE reconstruct (video → video)",
    restore: "Restore (SeedVR2, video → video)",
    interpolate: "Interpolate (RIFE, more frames per second)",
  };
  const TIMING_KEYS = ["queued", "probe", "load_model", "read", "compute", "write", "total", "fps",
    "peak_host_bytes", "peak_device_bytes", "device", "dtype"];
  const TIMING_LABELS = {
    queued: "Queued", probe: "Probe", load_model: "Load model", read: "Read", compute: "Compute",
    write: "Write", total: "Total", fps: "Throughput", peak_host_bytes: "Peak host memory",
    peak_device_bytes: "Peak device memory", device: "Device", dtype: "Precision",
    encode: "Encode", dit: "DiT", decode: "Decode", color_fix: "Colour fix",
  };
  // A restore job's compute time, split by stage (they add up to `compute`).
  const COMPUTE_SPLIT_KEYS = ["encode", "dit", "decode", "color_fix"];
  const SEEDVR2_VAE_FAMILY = "seedvr2";
  const PREFS_KEY = "vaebox.form";
  const OP_FILTER_KEY = "vaebox.opFilter";
  const VAE_CALL_OPS = new Set(["vae_encode", "vae_decode"]);

  const $ = (id) => document.getElementById(id);

  // ---------- state ----------
  const state = {
    models: [],
    file: null,
    xhr: null,
    jobs: new Map(),      // id -> Job
    order: [],            // ids, newest first
    nextOffset: null,
    loaded: PAGE,         // how many jobs to fetch on each poll (grows with "Load more")
    filter: "",
    opFilter: "",         // the op select (filterOps): the page hides cards itself, the list asked for is the same
    streams: new Map(),   // id -> EventSource
    streamFailures: new Map(),
    openDetails: new Set(), // "<id>:<section>" of <details> the user opened
    cards: new Map(),     // id -> { el, sigs, nodes } (per-section signatures and DOM nodes)
    pollTimer: null,
    places: new Map(),    // id of a queued job -> { position, waitS } (see queuePlaces)
    workerCount: 0,       // workers /healthz names: they share the queue's work (none: no wait is guessed)
  };

  // ---------- helpers ----------
  function h(tag, attrs, ...children) {
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

  const DASH = "–";
  const isNum = (v) => typeof v === "number" && Number.isFinite(v);

  function fmtBytes(n) {
    if (!isNum(n)) return DASH;
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)} ${units[i]}`;
  }
  const fmtSec = (s) => (isNum(s) ? `${s.toFixed(2)} s` : DASH);

  function fmtDuration(s) {
    if (!isNum(s) || s < 0) return DASH;
    s = Math.round(s);
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
    return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  }

  function parseTime(t) {
    if (!t) return null;
    const d = new Date(t);
    return Number.isNaN(d.getTime()) ? null : d;
  }

  function fmtTime(t) {
    const d = parseTime(t);
    if (!d) return DASH;
    const sameDay = d.toDateString() === new Date().toDateString();
    return sameDay
      ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
      : d.toLocaleString([], { dateStyle: "short", timeStyle: "medium" });
  }

  function fmtMedia(m) {
    if (!m) return "";
    const parts = [];
    if (isNum(m.width) && isNum(m.height)) parts.push(`${m.width}×${m.height}`);
    // A still picture has one frame and no rate or length worth a word.
    if (m.still) parts.push("picture");
    else {
      if (isNum(m.frames)) parts.push(`${m.frames} frames`);
      if (isNum(m.fps)) parts.push(`${m.fps.toFixed(2)} fps`);
      if (isNum(m.duration_s)) parts.push(fmtSec(m.duration_s));
    }
    if (m.codec) parts.push(m.codec);
    if (m.has_audio === true) parts.push("audio");
    return parts.join(" · ");
  }

  function shortId(id) { return String(id || "").slice(0, 8); }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function errorFromBody(status, statusText, text) {
    try {
      const body = JSON.parse(text);
      if (body && body.error) {
        return new ApiError(status, body.error.code || `http-${status}`, body.error.message || statusText || "");
      }
    } catch (_) { /* not JSON */ }
    const snippet = (text || "").trim().slice(0, 200);
    return new ApiError(status, `http-${status}`, snippet || statusText || "Request failed");
  }

  // ---------- access token ----------
  // A box with access tokens answers 401 to /v1 calls without one: the page asks once and keeps it in
  // this browser. Event streams and download links cannot send headers, so they carry it as
  // ?access_token= (GET only).
  const TOKEN_KEY = "vaebox-token";
  function token() { return localStorage.getItem(TOKEN_KEY) || ""; }
  function authHeaders(headers) {
    const t = token();
    return t ? Object.assign({}, headers, { Authorization: `Bearer ${t}` }) : headers;
  }
  function withToken(url) {
    const t = token();
    if (!t || !url) return url;
    return `${url}${url.includes("?") ? "&" : "?"}access_token=${encodeURIComponent(t)}`;
  }
  function askForToken() {
    const given = window.prompt("This box needs an access token. Paste yours (it is kept in this browser):", "");
    if (given === null || !given.trim()) return false;
    localStorage.setItem(TOKEN_KEY, given.trim());
    return true;
  }

  async function api(method, url, retried) {
    let res;
    try {
      res = await fetch(url, { method, headers: authHeaders({ Accept: "application/json" }), cache: "no-store" });
    } catch (e) {
      throw new ApiError(0, "network-error", "Could not reach the server.");
    }
    if (res.status === 401 && !retried && askForToken()) return api(method, url, true);
    if (res.status === 204) return null;
    const text = await res.text();
    if (!res.ok) throw errorFromBody(res.status, res.statusText, text);
    let body;
    try { body = text ? JSON.parse(text) : null; } catch (_) {
      throw new ApiError(res.status, "bad-response", "Server sent invalid JSON.");
    }
    // Some answers differ by status only (the whole clip: 202 queued now, 200 asked for before).
    if (body && typeof body === "object") Object.defineProperty(body, "httpStatus", { value: res.status });
    return body;
  }

  function errorNode(err) {
    const status = err.status ? ` (HTTP ${err.status})` : "";
    return [h("code", { class: "err-code", text: err.code || "error" }), " ", err.message || "", h("span", { class: "muted", text: status })];
  }

  function showError(box, err) {
    if (!err) { box.hidden = true; box.replaceChildren(); return; }
    box.replaceChildren(...errorNode(err));
    box.hidden = false;
  }

  let toastTimer = null;
  function toast(content, isError) {
    const t = $("toast");
    t.replaceChildren(...(Array.isArray(content) ? content : [content]));
    t.classList.toggle("toast-error", !!isError);
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 3500);
  }

  // ---------- health ----------
  // The header names the running job. Besides its own timer (which a background tab slows to once a
  // minute), it is asked again whenever a job the page follows changes status, so it follows the job.
  let healthSoonTimer = null;
  function refreshHealthSoon(delayMs) {
    clearTimeout(healthSoonTimer);
    healthSoonTimer = setTimeout(refreshHealth, delayMs || 150);
  }

  function noteStatusChange(previous, job) {
    if (previous && job && previous.status !== job.status) refreshHealthSoon();
  }

  // Whether /healthz still names as running a job the page already saw end (the store says so a moment
  // after the job's own event); a few such answers are asked again, then left to the timer.
  let staleHealthRetries = 0;
  function namesEndedJob(hz) {
    const ended = (id) => { const j = id && state.jobs.get(id); return !!j && TERMINAL.has(j.status); };
    return ended(hz.running_job) || (hz.workers || []).some((w) => ended(w.current_job));
  }

  async function refreshHealth() {
    const box = $("health");
    const text = $("health-text");
    try {
      const hz = await api("GET", "/healthz");
      box.dataset.state = hz.status === "ok" ? "ok" : "warn";
      const parts = [
        h("span", { class: "hz-item" }, h("span", { class: "muted", text: "device " }), h("strong", { text: hz.device || DASH })),
        h("span", { class: "hz-item" }, h("span", { class: "muted", text: "queue " }), h("strong", { text: isNum(hz.queue_depth) ? hz.queue_depth : DASH })),
      ];
      if (hz.running_job) {
        parts.push(h("span", { class: "hz-item" }, h("span", { class: "muted", text: "running " }),
          h("a", { href: `#job-${hz.running_job}`, title: hz.running_job, text: shortId(hz.running_job) })));
      } else {
        parts.push(h("span", { class: "hz-item muted", text: "idle" }));
      }
      // Several boxes on one queue: each worker, its device (and the memory it offers) and what it runs.
      const memoryNote = (bytes) => (bytes == null ? "" : `, ${(bytes / 2 ** 30).toFixed(1)} GiB`);
      for (const w of (hz.workers || []).filter(() => (hz.workers || []).length > 1 || hz.device === "none")) {
        const doing = w.current_job
          ? h("a", { href: `#job-${w.current_job}`, title: w.current_job, text: shortId(w.current_job) })
          : h("span", { class: "muted", text: "idle" });
        parts.push(h("span", { class: "hz-item hz-worker", title: `last heartbeat ${w.last_heartbeat}` },
          h("span", { class: "muted", text: `${w.name} (${w.device}${memoryNote(w.device_memory_bytes)}) ` }), doing));
      }
      state.workerCount = (hz.workers || []).length;
      if (namesEndedJob(hz) && staleHealthRetries < 5) { staleHealthRetries++; refreshHealthSoon(1000); }
      else staleHealthRetries = 0;
      if (hz.status && hz.status !== "ok") parts.unshift(h("strong", { text: hz.status }));
      if (hz.version) parts.push(h("span", { class: "hz-item muted", text: `v${hz.version}` }));
      text.replaceChildren(...parts.flatMap((n, i) => (i ? [" ", n] : [n])));
      if (hz.output_formats) {
        for (const option of $("output-format").options) {
          const available = !option.value || hz.output_formats[option.value] !== false;
          option.disabled = !available;
          option.title = available ? "" : "this box's ffmpeg has no encoder for it";
        }
        if (hz.default_output_format) $("output-format").options[0].textContent = `box default (${hz.default_output_format})`;
      }
    } catch (e) {
      box.dataset.state = "down";
      text.replaceChildren(h("strong", { text: "unreachable" }), " ", h("span", { class: "muted", text: e.code === "network-error" ? "" : `${e.code}` }));
    }
  }

  // ---------- models & form ----------
  function loadPrefs() {
    try { return JSON.parse(localStorage.getItem(PREFS_KEY)) || {}; } catch (_) { return {}; }
  }
  function savePrefs() {
    try {
      localStorage.setItem(PREFS_KEY, JSON.stringify({
        op: $("op").value, model: $("model").value, scale: $("scale").value,
        dtype: $("dtype").value, priority: $("priority").value, color_fix: $("color-fix").value,
      }));
    } catch (_) { /* storage disabled */ }
  }

  function setOptions(select, items, preferred) {
    const prev = preferred !== undefined ? preferred : select.value;
    select.replaceChildren(...items.map((it) => h("option", { value: it.value, disabled: it.disabled, text: it.label })));
    const enabled = items.filter((it) => !it.disabled);
    const pick = enabled.find((it) => String(it.value) === String(prev)) || enabled[0] || items[0];
    if (pick) select.value = String(pick.value);
  }

  // The box's presets (config.toml's [presets.NAME]): the select shows only when there are some.
  async function loadPresets() {
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
  function applyPreset(name) {
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

  async function loadModels() {
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

  function currentModel() {
    return state.models.find((m) => m.name === $("model").value) || null;
  }

  function onOpChange(prefs) {
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

  function onModelChange(prefs) {
    prefs = prefs && prefs.op !== undefined ? prefs : {};
    const m = currentModel();
    const op = $("op").value;
    $("model-desc").textContent = !m ? (state.models.length ? "No model offers this operation." : "")
      : m.present === false ? `Not installed on the server. ${m.description || ""}` : (m.description || "");
    for (const el of document.querySelectorAll("#job-form [data-ops]")) el.hidden = !el.dataset.ops.split(" ").includes(op);
    $("scale").disabled = $("scale-field").hidden;
    const restore = op === "restore";
    const scales = m && Array.isArray(m.scales) && m.scales.length ? m.scales : restore ? [1, 2, 3, 4] : [2, 4];
    // Each op starts on the server's own default scale, not on the one the previous op left behind.
    const opChanged = $("scale").dataset.op !== op;
    $("scale").dataset.op = op;
    const choices = scales.map((s) => ({ value: s, label: `×${s}` }));
    if (restore) choices.push({ value: "size", label: "height × width…" });
    const saved = prefs.scale !== undefined && choices.some((c) => String(c.value) === String(prefs.scale));
    setOptions($("scale"), choices, saved ? prefs.scale : opChanged ? (restore ? 2 : Math.max(...scales)) : undefined);
    if (restore) fillVaes(m, prefs.vae);
    onScaleChange();
    const dtypes = m && Array.isArray(m.dtypes) && m.dtypes.length ? m.dtypes : ["f32", "bf16"];
    setOptions($("dtype"), [{ value: "auto", label: "auto" }, ...dtypes.map((d) => ({ value: d, label: d }))],
      prefs.dtype !== undefined ? prefs.dtype : undefined);
    checkFileOp();
    updateSubmit();
  }

  function onScaleChange() {
    const bySize = !$("scale-field").hidden && $("scale").value === "size";
    $("size-field").hidden = !bySize;
    $("size-help").hidden = !bySize;
    $("fps-field").hidden = $("rate-field").hidden || $("rate").value !== "fps";
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

  function checkFileOp() {
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

  function updateSubmit() {
    const m = currentModel();
    const busy = !!state.xhr;
    const noVae = $("op").value === "restore" && !$("vae").value;
    $("submit").disabled = busy || !state.file || !m || m.present === false || noVae;
    // A latent is decoded whole: there is no first few seconds of it to try.
    $("try-first").disabled = $("submit").disabled || $("op").value === "vae_decode";
    $("abort").hidden = !busy;
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
  }

  function setupDrop() {
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

  function submitJob(ev) {
    ev.preventDefault();
    if (state.xhr || !state.file) return;
    const entries = formEntries();
    if (entries) upload(entries, state.file);
  }

  // "Try first N s": the same settings over the clip's first seconds. The whole clip is run from the short
  // job's card once its result looks right; the server keeps the file for it (see runWhole).
  function tryFirst() {
    if (state.xhr || !state.file) return;
    const seconds = Number($("try-seconds").value);
    if (!(seconds > 0)) {
      showError($("form-error"), new ApiError(0, "invalid-range", "Give the seconds to try, more than 0."));
      $("try-seconds").focus();
      return;
    }
    const entries = formEntries();
    if (!entries) return;
    upload([...entries, ["duration", String(seconds)]], state.file);
  }

  // The whole clip of a job over part of its input, made by the server from the input that job kept, with
  // its settings: nothing is sent again, so it works after a reload and for tries sent by curl or a script.
  async function runWhole(job, btn) {
    btn.disabled = true;
    try {
      const whole = await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/whole`);
      if (whole && whole.id) {
        whole._localAt = Date.now();
        upsertJob(whole, true);
        render();
        syncStreams();
        const link = h("a", { href: `#job-${whole.id}`, text: shortId(whole.id) });
        if (whole.httpStatus === 200) toast([`The whole clip was asked for before: `, link, ` is ${whole.status}`]);
        else toast(["Queued the whole clip as ", link]);
      }
    } catch (e) {
      toast(errorNode(e), true);
    }
    btn.disabled = false;
  }

  // The form's fields as [name, value] pairs, checked as far as the page can; null after showing why not.
  function formEntries() {
    const prio = $("priority").value.trim() === "" ? 0 : Number($("priority").value);
    if (!Number.isInteger(prio)) {
      showError($("form-error"), new ApiError(0, "invalid-priority", "Priority must be an integer."));
      $("priority").focus();
      return null;
    }
    const op = $("op").value;
    let opFields = [];
    try {
      if (op === "upscale") opFields = [["scale", $("scale").value]];
      else if (op === "restore") opFields = restoreFields();
      else if (op === "interpolate") opFields = interpolateFields();
    } catch (e) {
      showError($("form-error"), e);
      if (e.field && $("restore-advanced").contains(e.field)) $("restore-advanced").open = true;
      if (e.field) e.field.focus();
      return null;
    }
    savePrefs();
    const entries = [["op", op], ["model", $("model").value], ...opFields, ["priority", String(prio)], ["dtype", $("dtype").value]];
    if (op !== "vae_encode" && $("output-format").value) entries.push(["output_format", $("output-format").value]);
    const callback = $("callback-url").value.trim();
    if (callback) entries.push(["callback_url", callback]);
    return entries;
  }

  // Sends the fields and the file as a job.
  function upload(entries, file) {
    const fd = new FormData();
    // Text fields first so a streaming server can validate before reading the file.
    for (const [k, v] of entries) fd.append(k, v);
    fd.append("file", file, file.name);

    const xhr = new XMLHttpRequest();
    state.xhr = xhr;
    const bar = $("upload-progress");
    const txt = $("upload-text");
    const total = file.size;
    const started = performance.now();
    bar.value = 0;
    $("upload").hidden = false;
    txt.textContent = "Starting upload…";
    showError($("form-error"), null);
    updateSubmit();

    xhr.upload.addEventListener("progress", (e) => {
      const tot = e.lengthComputable ? e.total : total;
      const frac = tot ? e.loaded / tot : 0;
      bar.value = Math.min(1, frac);
      const secs = (performance.now() - started) / 1000;
      const rate = secs > 0 ? e.loaded / secs : 0;
      const eta = rate > 0 ? (tot - e.loaded) / rate : NaN;
      txt.textContent = `${Math.round(frac * 100)}% · ${fmtBytes(e.loaded)} / ${fmtBytes(tot)} · ${fmtBytes(rate)}/s` +
        (frac < 1 && isNum(eta) ? ` · ${fmtDuration(eta)} left` : "");
    });
    xhr.upload.addEventListener("load", () => { bar.removeAttribute("value"); txt.textContent = "Upload complete; waiting for the server…"; });

    const done = () => { state.xhr = null; updateSubmit(); };
    xhr.addEventListener("load", () => {
      done();
      if (xhr.status >= 200 && xhr.status < 300) {
        let job = null;
        try { job = JSON.parse(xhr.responseText); } catch (_) { /* ignore */ }
        $("upload").hidden = true;
        // The file stays chosen (input, drop zone, state.file): the next try of another setting is one click,
        // not a second trip through the file picker.
        if (job && job.id) {
          job._localAt = Date.now();
          upsertJob(job, true);
          render();
          syncStreams();
          toast(["Queued ", h("a", { href: `#job-${job.id}`, text: shortId(job.id) })]);
        } else {
          poll();
        }
      } else {
        $("upload").hidden = true;
        showError($("form-error"), errorFromBody(xhr.status, xhr.statusText, xhr.responseText));
      }
    });
    xhr.addEventListener("error", () => {
      done(); $("upload").hidden = true;
      showError($("form-error"), new ApiError(0, "network-error", "Upload failed: connection lost."));
    });
    xhr.addEventListener("abort", () => {
      done(); $("upload").hidden = true;
      toast("Upload cancelled.");
    });
    xhr.open("POST", "/v1/jobs");
    xhr.setRequestHeader("Accept", "application/json");
    if (token()) xhr.setRequestHeader("Authorization", `Bearer ${token()}`);
    xhr.send(fd);
  }

  // A restore field the user left empty is not sent: the server's default applies, and a field it does
  // not know would be refused. Checks that need no server are made here so the file is not uploaded in vain.
  function restoreFields() {
    const fields = [];
    const dit = currentModel();
    const vae = $("vae").value;
    if (vae && !(dit && dit.pairs_with === vae)) fields.push(["vae", vae]);
    if ($("scale").value === "size") {
      const height = wholeNumber("height", "Height", 16), width = wholeNumber("width", "Width", 16);
      if (height === null || width === null) throw fieldError(height === null ? "height" : "width", "Give both height and width.");
      fields.push(["height", height], ["width", width]);
    } else {
      fields.push(["scale", $("scale").value]);
    }
    const seed = wholeNumber("seed", "Seed", Number.MIN_SAFE_INTEGER);
    if (seed !== null) fields.push(["seed", seed]);
    if ($("color-fix").value) fields.push(["color_fix", $("color-fix").value]);
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

  // ---------- jobs ----------
  function upsertJob(job, prepend) {
    if (!job || !job.id) return;
    const had = state.jobs.has(job.id);
    state.jobs.set(job.id, job);
    if (!had && prepend) state.order.unshift(job.id);
    else if (!had) state.order.push(job.id);
  }

  function removeJob(id) {
    state.jobs.delete(id);
    state.order = state.order.filter((x) => x !== id);
    closeStream(id);
  }

  function listUrl(offset, limit) {
    const p = new URLSearchParams();
    if (state.filter) p.set("status", state.filter);
    p.set("limit", String(limit));
    p.set("offset", String(offset));
    return `/v1/jobs?${p}`;
  }

  let polling = false;
  async function poll() {
    if (polling) return;
    polling = true;
    clearTimeout(state.pollTimer);
    try {
      const limit = Math.max(PAGE, Math.min(state.loaded, 500));
      const data = await api("GET", listUrl(0, limit));
      const jobs = (data && data.jobs) || [];
      const fresh = new Map();
      for (const j of jobs) {
        // A live stream's copy has the latest progress; but a job run by a worker in another process reaches
        // the stream only when the server next looks at the store, so a newer status in the list wins.
        const cur = state.jobs.get(j.id);
        noteStatusChange(cur, j);
        const streamed = state.streams.has(j.id) && cur && !TERMINAL.has(j.status) && cur.status === j.status;
        fresh.set(j.id, streamed ? cur : j);
      }
      // Keep just-submitted jobs the list may not show yet (matching the filter).
      for (const id of state.order) {
        const j = state.jobs.get(id);
        if (!fresh.has(id) && j && j._localAt && Date.now() - j._localAt < 20000
            && (!state.filter || j.status === state.filter)) fresh.set(id, j);
      }
      for (const id of [...state.streams.keys()]) if (!fresh.has(id)) closeStream(id);
      state.jobs = fresh;
      state.order = [...fresh.values()].sort(byNewest).map((j) => j.id);
      state.nextOffset = data ? data.next_offset : null;
      showError($("jobs-error"), null);
      try { await refreshPlaces(jobs); } catch (_) { state.places = new Map(); } // no places rather than wrong ones
      render();
      syncStreams();
    } catch (e) {
      showError($("jobs-error"), e);
    } finally {
      polling = false;
      state.pollTimer = setTimeout(poll, document.hidden ? POLL_HIDDEN_MS : POLL_MS);
    }
  }

  function byNewest(a, b) {
    const ta = parseTime(a.created_at), tb = parseTime(b.created_at);
    return (tb ? tb.getTime() : 0) - (ta ? ta.getTime() : 0);
  }

  async function loadMore() {
    if (state.nextOffset === null || state.nextOffset === undefined) return;
    const btn = $("more");
    btn.disabled = true;
    try {
      const data = await api("GET", listUrl(state.nextOffset, PAGE));
      for (const j of (data && data.jobs) || []) upsertJob(j, false);
      state.loaded = state.order.length;
      state.nextOffset = data ? data.next_offset : null;
      render();
    } catch (e) {
      showError($("jobs-error"), e);
    } finally {
      btn.disabled = false;
    }
  }

  // ---------- live updates (SSE) ----------
  function closeStream(id) {
    const es = state.streams.get(id);
    if (es) { es.close(); state.streams.delete(id); }
  }

  function openStream(id) {
    const es = new EventSource(withToken(`/v1/jobs/${encodeURIComponent(id)}/events`));
    state.streams.set(id, es);
    es.addEventListener("job", (ev) => {
      let job;
      try { job = JSON.parse(ev.data); } catch (_) { return; }
      if (!job || job.id !== id) return;
      state.streamFailures.delete(id);
      if (state.jobs.has(id)) {
        const prev = state.jobs.get(id);
        noteStatusChange(prev, job);
        if (prev && prev._localAt) job._localAt = prev._localAt;
        state.jobs.set(id, job);
        renderJob(job);
        updateCount();
      }
      if (TERMINAL.has(job.status)) { closeStream(id); syncStreams(); }
    });
    es.addEventListener("error", () => {
      // CONNECTING: the browser retries by itself. CLOSED: give up; polling takes over.
      if (es.readyState === EventSource.CLOSED) {
        state.streams.delete(id);
        state.streamFailures.set(id, (state.streamFailures.get(id) || 0) + 1);
      }
    });
  }

  function syncStreams() {
    if (typeof EventSource === "undefined") return;
    for (const [id] of state.streams) {
      const j = state.jobs.get(id);
      if (!j || TERMINAL.has(j.status)) closeStream(id);
    }
    const active = state.order.map((id) => state.jobs.get(id))
      .filter((j) => j && !TERMINAL.has(j.status) && !state.streams.has(j.id) && (state.streamFailures.get(j.id) || 0) < 3)
      .sort((a, b) => (a.status === "running" ? 0 : 1) - (b.status === "running" ? 0 : 1)
        || (b.priority || 0) - (a.priority || 0));
    for (const j of active) {
      if (state.streams.size >= MAX_STREAMS) break;
      openStream(j.id);
    }
  }

  // ---------- actions ----------
  async function cancelJob(id, btn) {
    btn.disabled = true;
    try {
      const job = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`);
      if (job && job.id) { noteStatusChange(state.jobs.get(job.id), job); state.jobs.set(job.id, job); renderJob(job); }
      toast(`Cancel requested for ${shortId(id)}.`);
    } catch (e) {
      toast(errorNode(e), true);
      btn.disabled = false;
    }
  }

  async function deleteJob(id, btn) {
    const j = state.jobs.get(id);
    const name = j && j.input ? j.input.file_name : shortId(id);
    if (!window.confirm(`Delete job ${shortId(id)} (${name}) and its output?`)) return;
    btn.disabled = true;
    try {
      await api("DELETE", `/v1/jobs/${encodeURIComponent(id)}`);
      removeJob(id);
      render();
      toast(`Deleted ${shortId(id)}.`);
      $("jobs-heading").focus();
    } catch (e) {
      if (e.status === 404) { removeJob(id); render(); return; }
      toast(errorNode(e), true);
      btn.disabled = false;
    }
  }

  // ---------- rendering ----------
  function etaOf(job) {
    const p = job.progress || {};
    if (isNum(p.eta_s)) return p.eta_s;
    const started = parseTime(job.started_at);
    if (job.status === "running" && started && isNum(p.fraction) && p.fraction > 0.02 && p.fraction < 1) {
      const el = (Date.now() - started.getTime()) / 1000;
      return el * (1 - p.fraction) / p.fraction;
    }
    return null;
  }

  function fractionOf(job) {
    const p = job.progress || {};
    if (isNum(p.fraction)) return Math.max(0, Math.min(1, p.fraction));
    if (isNum(p.done) && isNum(p.total) && p.total > 0) return Math.max(0, Math.min(1, p.done / p.total));
    return null;
  }

  // ---------- queue places ----------
  // A queued job's place in the order workers claim jobs (higher priority first, then first come), and a
  // guess at its wait: what the running jobs have left, plus for each job ahead the median run time of
  // recent finished jobs of its op, shared among the workers. No guess where a part of it has no basis,
  // nor while no worker is known to run jobs.
  const RECENT_RUNS = 20;

  function runSeconds(job) {
    const started = parseTime(job.started_at), finished = parseTime(job.finished_at);
    if (started && finished) return (finished.getTime() - started.getTime()) / 1000;
    return job.timings && isNum(job.timings.total) ? job.timings.total : null;
  }

  function median(values) {
    const sorted = [...values].sort((a, b) => a - b);
    const mid = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  }

  // op -> median seconds, from `jobs` newest first.
  function typicalRuns(jobs) {
    const runsByOp = new Map();
    for (const job of jobs) {
      const seconds = job.status === "succeeded" ? runSeconds(job) : null;
      if (!isNum(seconds)) continue;
      const runs = runsByOp.get(job.op) || [];
      if (runs.length < RECENT_RUNS) runs.push(seconds);
      runsByOp.set(job.op, runs);
    }
    return new Map([...runsByOp].map(([op, runs]) => [op, median(runs)]));
  }

  function remainingSeconds(job, typical) {
    const eta = etaOf(job);
    if (isNum(eta)) return Math.max(0, eta);
    const started = parseTime(job.started_at);
    const usual = typical.get(job.op);
    return started && isNum(usual) ? Math.max(0, usual - (Date.now() - started.getTime()) / 1000) : null;
  }

  // `jobs` in the server's order (newest first): id -> { position, waitS (null: no guess) }.
  function queuePlaces(jobs, workers) {
    const typical = typicalRuns(jobs);
    const claimOrder = jobs.filter((j) => j.status === "queued").reverse() // first come first...
      .sort((a, b) => (b.priority || 0) - (a.priority || 0));             // ...within a priority (a stable sort)
    const addKnown = (sum, seconds) => (sum === null || !isNum(seconds) ? null : sum + seconds);
    let ahead = workers > 0 ? jobs.filter((j) => j.status === "running").reduce((sum, j) => addKnown(sum, remainingSeconds(j, typical)), 0) : null;
    const places = new Map();
    claimOrder.forEach((job, i) => {
      places.set(job.id, { position: i + 1, waitS: ahead === null ? null : ahead / workers });
      ahead = addKnown(ahead, typical.get(job.op));
    });
    return places;
  }

  // The jobs the places are counted among: the page's own list when it holds every job, else the queue,
  // the running jobs and the recent finished ones asked for.
  async function refreshPlaces(listed) {
    if (![...state.jobs.values()].some((j) => j.status === "queued")) { state.places = new Map(); return; }
    const whole = !state.filter && (state.nextOffset === null || state.nextOffset === undefined);
    let jobs = listed;
    if (!whole) {
      const lists = await Promise.all([["queued", 500], ["running", 50], ["succeeded", 50]]
        .map(([status, limit]) => api("GET", `/v1/jobs?status=${status}&limit=${limit}`)));
      jobs = lists.flatMap((list) => (list && list.jobs) || []);
    }
    state.places = queuePlaces(jobs, state.workerCount);
  }

  function placeText(job) {
    const place = job.status === "queued" ? state.places.get(job.id) : null;
    if (!place) return null;
    // "Next" only for the first in line: a short wait behind other jobs is still a wait (a median run
    // under a second once showed the second in line as "starts next").
    const next = place.position === 1 && place.waitS < 1;
    const wait = !isNum(place.waitS) ? "" : next ? " · starts next" : ` · starts in about ${fmtDuration(Math.max(1, place.waitS))}`;
    return `queued — position ${place.position}${wait}`;
  }

  function buildPlace(job) {
    const text = placeText(job);
    return text ? h("p", { class: "queue-place", text }) : null;
  }

  function timingValue(key, v) {
    if (v === null || v === undefined || v === "") return DASH;
    if (key.endsWith("_bytes")) return fmtBytes(v);
    if (key === "fps") return isNum(v) ? `${v.toFixed(2)} fps` : String(v);
    if (typeof v === "number") return fmtSec(v);
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  // Values are text or nodes.
  function kvTable(caption, rows) {
    return h("table", { class: "kv" },
      h("caption", { class: "visually-hidden", text: caption }),
      h("tbody", null, rows.map(([k, v]) => h("tr", null, h("th", { scope: "row", text: k }), h("td", null, v)))));
  }

  // A card is a list of sections; each section is rebuilt only when its own data changes,
  // so buttons under the pointer are not swapped out on every progress event.
  function titleOf(job) { return (job.input && job.input.file_name) || shortId(job.id); }

  function sizeText(params) {
    const r = params.restore || {};
    if (isNum(r.height) && isNum(r.width)) return `${r.width}×${r.height} area`;
    return params.scale ? `×${params.scale}` : null;
  }

  // The webhook's state: "webhook delivered", "webhook pending (2 tries)".
  function callbackText(callback) {
    if (!callback || !callback.state) return null;
    const tries = Array.isArray(callback.deliveries) ? callback.deliveries.length : 0;
    return `webhook ${callback.state}${tries > 1 || (tries && callback.state !== "delivered") ? ` (${tries} tr${tries === 1 ? "y" : "ies"})` : ""}`;
  }

  // A job over part of its input: "first 5 s", "from 12.5 s, 48 frames".
  function rangeText(range) {
    if (!range) return null;
    const from = isNum(range.start) ? `from ${range.start} s` : isNum(range.start_frame) ? `from frame ${range.start_frame}` : "";
    const length = isNum(range.duration) ? `${range.duration} s` : isNum(range.frames) ? `${range.frames} frames` : "to the end";
    return from ? `${from}, ${length}` : `first ${length}`;
  }

  function buildTop(job) {
    const st = job.status || "unknown";
    const params = job.params || {};
    const title = titleOf(job);
    const head = h("div", { class: "job-head" },
      thumbnailOf(job),
      h("span", { class: `badge st-${st}`, text: st }),
      h("h3", { class: "job-title", title }, title),
      h("span", { class: "job-meta muted" },
        [job.op, job.model,
          sizeText(params),
          rangeText(params.range),
          job.from_try ? `whole clip of ${shortId(job.from_try)}` : null,
          params.dtype ? params.dtype : null,
          job.priority ? `prio ${job.priority}` : null,
          callbackText(job.callback)].filter(Boolean).join(" · ")));

    const actions = h("div", { class: "job-actions" });
    if (job.output && job.output.url && job.output.kept !== false && st === "succeeded") {
      actions.append(h("a", {
        class: "button primary", href: withToken(job.output.url), download: job.output.file_name || "",
        "aria-label": `Download ${job.output.file_name || "result"}`,
      }, "Download"));
    }
    if (st === "succeeded" && params.range) {
      actions.append(h("button", { type: "button", onclick: (e) => runWhole(job, e.currentTarget), "aria-label": `Run the whole clip of ${title} with the same settings` }, "Run the whole clip"));
    }
    if (canCompare(job)) {
      actions.append(h("button", { type: "button", onclick: () => openCompare(job.id), "aria-label": `Compare ${title} before and after` }, "Compare"));
    }
    if (st === "queued" || st === "running") {
      actions.append(h("button", { type: "button", onclick: (e) => cancelJob(job.id, e.currentTarget), "aria-label": `Cancel job ${title}` }, "Cancel"));
    }
    if (TERMINAL.has(st)) {
      actions.append(h("button", { type: "button", class: "danger", onclick: (e) => deleteJob(job.id, e.currentTarget), "aria-label": `Delete job ${title}` }, "Delete"));
    }
    return h("div", { class: "job-top" }, head, actions);
  }

  // ---------- previews ----------
  // The server's still is of the input until the job succeeded, then of the output (none of an output
  // that was not kept), at one URL. A page keeps an image it has shown by its URL for as long as it is
  // open, whatever the cache headers say, so a card that showed the input's still under that URL would
  // go on showing it. So the still of a job not yet done is fetched and shown as a data: URL of its own
  // (the page's Content-Security-Policy allows data: images, not blob:), and the URL itself is only shown
  // for a job that is done (whose still no longer changes).
  function thumbnailOf(job) {
    const showsOutput = job.status === "succeeded" && job.output && job.output.kept !== false && !!job.output.media;
    if (!showsOutput && !(job.input && job.input.media)) return null;
    const url = `/v1/jobs/${job.id}/thumbnail`;
    const img = h("img", { class: "thumb", alt: "", "data-side": showsOutput ? "output" : "input" });
    img.addEventListener("error", () => img.remove());
    if (TERMINAL.has(job.status)) {
      img.loading = "lazy";
      img.src = withToken(url);
    } else {
      loadStillOnce(img, url);
    }
    return img;
  }

  function dataUrlOf(blob) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.addEventListener("load", () => resolve(reader.result));
      reader.addEventListener("error", () => reject(reader.error));
      reader.readAsDataURL(blob);
    });
  }

  async function loadStillOnce(img, url) {
    try {
      const res = await fetch(url, { headers: authHeaders({}), cache: "no-store" });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      img.src = await dataUrlOf(await res.blob());
    } catch (_) {
      img.remove();
    }
  }

  const COMPARABLE_OPS = new Set(["upscale", "restore", "vae_reconstruct"]);
  function canCompare(job) {
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

  function openCompare(id, split) {
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

  function setupCompare() {
    const before = $("compare-before");
    const after = $("compare-after");
    $("compare-split").addEventListener("input", (e) => setSplit(e.target.value));
    $("compare-close").addEventListener("click", closeCompare);
    $("compare").addEventListener("close", closeCompare);
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
  function compareFromHash() {
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

  function buildProgress(job) {
    const st = job.status;
    const frac = fractionOf(job);
    if (!(st === "running" || (st === "queued" && frac))) return null;
    const p = job.progress || {};
    const eta = etaOf(job);
    const started = parseTime(job.started_at);
    const label = [
      frac !== null ? `${(frac * 100).toFixed(1)}%` : "working…",
      p.stage || null,
      isNum(p.done) && isNum(p.total) && p.total > 0 ? `${p.done} / ${p.total} ${p.unit || ""}`.trim() : null,
      eta !== null ? `ETA ${fmtDuration(eta)}` : null,
    ].filter(Boolean).join(" · ");
    const prog = h("progress", { max: "1", "aria-label": `Progress of ${titleOf(job)}` });
    if (frac !== null) prog.value = frac;
    return h("div", { class: "job-progress" }, prog,
      h("span", { class: "progress-text" }, label,
        started ? h("span", { class: "muted" }, " · elapsed ",
          h("span", { class: "elapsed", "data-since": job.started_at, text: fmtDuration((Date.now() - started.getTime()) / 1000) })) : null));
  }

  function buildError(job) {
    if (!job.error) return null;
    return h("div", { class: "error-box job-error", role: "note" },
      h("code", { class: "err-code", text: job.error.code || "error" }), " ", job.error.message || "");
  }

  function buildFacts(job) {
    const input = job.input || {};
    const facts = h("dl", { class: "facts" });
    const addFact = (k, ...v) => { facts.append(h("dt", { text: k }), h("dd", null, ...v)); };
    addFact("Input", input.file_name || DASH, " ", h("span", { class: "muted", text: fmtBytes(input.bytes) }),
      input.media ? h("span", { class: "media", text: fmtMedia(input.media) }) : null);
    if (job.output) {
      const o = job.output;
      addFact("Output",
        o.url && o.kept !== false ? h("a", { href: withToken(o.url), download: o.file_name || "", text: o.file_name || "result" }) : (o.file_name || DASH),
        " ", h("span", { class: "muted", text: fmtBytes(o.bytes) }),
        o.kept === false ? h("span", { class: "muted", text: " · returned to the caller, not kept" }) : null,
        o.media ? h("span", { class: "media", text: fmtMedia(o.media) }) : null);
    }
    addFact("Created", h("time", { datetime: job.created_at || "", text: fmtTime(job.created_at) }),
      job.started_at ? h("span", { class: "muted", text: ` · started ${fmtTime(job.started_at)}` }) : null,
      job.finished_at ? h("span", { class: "muted", text: ` · finished ${fmtTime(job.finished_at)}` }) : null);
    addFact("ID", h("code", { class: "id", text: job.id }));
    return facts;
  }

  const STAGE_KEYS = ["queued", "probe", "load_model", "read", "compute", "write", "total"];

  function timingsBlock(job) {
    const t = job.timings && typeof job.timings === "object" ? job.timings : null;
    const hasAny = t && Object.keys(t).length > 0;
    if (!hasAny && job.status !== "running") return null;
    const tt = t || {};
    // Stage durations as one row (columns = stages), the rest as key/value pairs.
    const stages = h("table", { class: "stages" },
      h("caption", { class: "visually-hidden", text: "Stage timings in seconds" }),
      h("thead", null, h("tr", null, STAGE_KEYS.map((k) => h("th", { scope: "col", text: TIMING_LABELS[k] })))),
      h("tbody", null, h("tr", null, STAGE_KEYS.map((k) => h("td", { class: k === "total" ? "total" : null, text: timingValue(k, tt[k]) })))));
    const splitKeys = COMPUTE_SPLIT_KEYS.filter((k) => k in tt);
    const split = splitKeys.length ? h("table", { class: "stages compute-split" },
      h("caption", { class: "visually-hidden", text: "Compute time by stage, in seconds" }),
      h("thead", null, h("tr", null, h("td"), splitKeys.map((k) => h("th", { scope: "col", text: TIMING_LABELS[k] })))),
      h("tbody", null, h("tr", null, h("th", { scope: "row", text: `${TIMING_LABELS.compute}:` }),
        splitKeys.map((k) => h("td", { text: timingValue(k, tt[k]) }))))) : null;
    const other = [...TIMING_KEYS.filter((k) => !STAGE_KEYS.includes(k)),
      ...Object.keys(tt).filter((k) => !TIMING_KEYS.includes(k) && !COMPUTE_SPLIT_KEYS.includes(k))];
    const table = h("div", { class: "timings" },
      h("div", { class: "scroll-x" }, stages, split),
      kvTable("Other timings", other.map((k) => [TIMING_LABELS[k] || k, timingValue(k, tt[k])])));
    const bits = [isNum(tt.total) ? `${fmtSec(tt.total)} total` : null, isNum(tt.dit) ? `DiT ${fmtSec(tt.dit)}` : null,
      isNum(tt.fps) ? `${tt.fps.toFixed(2)} fps` : null].filter(Boolean);
    return { key: "timings", summary: `Timings${bits.length ? ` — ${bits.join(" · ")}` : ""}`, table };
  }

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
    pairs_per_call: "Frame pairs per call", resumed_from: "Resumed",
    // A restore's front-end options (the form's Advanced fields), in the words the form uses.
    fit: "Fit", padding: "Padding", prepend_frames: "Mirrored lead frames", input_noise_scale: "Input noise",
    latent_noise_scale: "Latent noise", uniform_batches: "Last batch",
  };
  // Restore plans say how the frames were batched and sized; their batch_frames/overlap go in the Batches row.
  const PLAN_ORDER = ["tile", "overlap", "chunk_frames", "batches", "output", "resize", "frames", "seed", "color_fix", "dit", "notes"];
  const PLAN_FOLDED = ["fallbacks", "row_split", "batch_frames", "batch_overlap"];

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
    if (k === "resumed_from" && typeof v === "object") return resumedText(v);
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
  function resumedText(v) {
    const batch = isNum(v.batch) ? `batch ${v.batch + 1}, ` : "";
    const tiles = isNum(v.tiles) ? `${v.tiles} tile${v.tiles === 1 ? "" : "s"} spooled, ` : "";
    return `from ${batch}${tiles}frame ${v.frame} (${isNum(v.saved_s) ? `${v.saved_s.toFixed(1)} s` : DASH} of work kept)`;
  }

  function planBlock(job) {
    const pl = job.plan;
    if (!pl || typeof pl !== "object") return null;
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

  function metricsBlock(job) {
    const m = job.metrics;
    if (!m || typeof m !== "object" || !Object.keys(m).length) return null;
    const rows = Object.entries(m).map(([k, v]) => [k,
      v === null || v === undefined ? DASH
        : typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(4))
          : typeof v === "object" ? JSON.stringify(v) : String(v)]);
    return { key: "metrics", summary: "Metrics", table: kvTable("Metrics", rows) };
  }

  const SECTIONS = [
    { name: "top", sig: (j) => JSON.stringify([j.status, j.op, j.model, j.params, j.priority, j.input && j.input.file_name, j.output && j.output.url, j.output && j.output.file_name, j.output && j.output.kept]), build: buildTop },
    { name: "place", sig: (j) => JSON.stringify(placeText(j)), build: buildPlace },
    { name: "progress", sig: (j) => JSON.stringify([j.status, j.progress, j.started_at]), build: buildProgress },
    { name: "error", sig: (j) => JSON.stringify(j.error), build: buildError },
    { name: "facts", sig: (j) => JSON.stringify([j.id, j.input, j.output, j.created_at, j.started_at, j.finished_at]), build: buildFacts },
    { name: "timings", sig: (j) => JSON.stringify([j.status, j.timings]), block: timingsBlock },
    { name: "plan", sig: (j) => JSON.stringify(j.plan), block: planBlock },
    { name: "metrics", sig: (j) => JSON.stringify(j.metrics), block: metricsBlock },
  ];

  // <details> sections keep their element (and open state); only summary text and table change.
  function applyBlock(job, old, blk) {
    if (!blk) return null;
    if (old && old.tagName === "DETAILS") {
      const sum = old.querySelector("summary");
      if (sum.textContent !== blk.summary) sum.textContent = blk.summary;
      sum.nextElementSibling.replaceWith(blk.table);
      return old;
    }
    const k = `${job.id}:${blk.key}`;
    const d = h("details", { class: "block", open: state.openDetails.has(k) }, h("summary", { text: blk.summary }), blk.table);
    d.addEventListener("toggle", () => { if (d.open) state.openDetails.add(k); else state.openDetails.delete(k); });
    return d;
  }

  function renderJob(job) {
    let card = state.cards.get(job.id);
    if (!card) {
      card = { el: h("li", { class: "job", id: `job-${job.id}` }), sigs: {}, nodes: {} };
      state.cards.set(job.id, card);
    }
    const st = job.status || "unknown";
    card.el.className = `job st-${st}`;
    card.el.setAttribute("aria-label", `${titleOf(job)}, ${st}`);
    let prev = null;
    for (const sec of SECTIONS) {
      const sig = sec.sig(job);
      let node = card.nodes[sec.name] || null;
      if (card.sigs[sec.name] !== sig) {
        card.sigs[sec.name] = sig;
        const next = sec.block ? applyBlock(job, node, sec.block(job)) : sec.build(job);
        if (node && node !== next) {
          const active = document.activeElement;
          const hadFocus = active && node.contains(active);
          const focusText = hadFocus ? (active.textContent || "").trim() : null;
          if (next) node.replaceWith(next); else node.remove();
          if (hadFocus) {
            const same = next && [...next.querySelectorAll("button, a, summary")]
              .find((n) => (n.textContent || "").trim() === focusText && !n.disabled);
            if (same) same.focus();
            else { card.el.setAttribute("tabindex", "-1"); card.el.focus(); }
          }
        }
        node = next;
        card.nodes[sec.name] = node;
      }
      if (node) {
        const want = prev ? prev.nextSibling : card.el.firstChild;
        if (want !== node) card.el.insertBefore(node, want);
        prev = node;
      }
    }
    return card.el;
  }

  // A synchronous /v1/decode or /v1/encode call's job: its result went back in the call's answer and was not
  // kept, which no other job's output says (kept: false). The API does not say which box answers a call, so
  // one still running reads as an ordinary job until it has been answered.
  function isRemoteCall(job) {
    return VAE_CALL_OPS.has(job.op) && !!job.output && job.output.kept === false;
  }

  // The op select: remote VAE calls (many and small, from a diffusers pipeline) can bury the jobs sent by
  // hand, so they can be left out, or shown alone; or one op only.
  function shownByOpFilter(job) {
    const f = state.opFilter;
    if (!job || !f) return true;
    if (f === "not-remote") return !isRemoteCall(job);
    if (f === "remote") return isRemoteCall(job);
    return job.op === f;
  }

  function storedOpFilter() {
    try { return localStorage.getItem(OP_FILTER_KEY) || ""; } catch (_) { return ""; }
  }

  function setOpFilter(value) {
    const select = $("op-filter");
    select.value = value || "";
    if (select.value !== (value || "")) select.value = ""; // a kept choice this page no longer offers
    state.opFilter = select.value;
    try { localStorage.setItem(OP_FILTER_KEY, state.opFilter); } catch (_) { /* storage disabled */ }
  }

  function updateCount() {
    const n = state.order.length;
    const shown = state.order.filter((id) => shownByOpFilter(state.jobs.get(id))).length;
    const active = state.order.filter((id) => { const j = state.jobs.get(id); return j && !TERMINAL.has(j.status); }).length;
    const of = shown < n ? `${shown} of ${n} shown` : String(n);
    $("jobs-count").textContent = n ? `(${of}${active ? `, ${active} active` : ""})` : "";
  }

  function render() {
    const list = $("jobs");
    // drop cards for jobs no longer shown
    for (const [id, c] of state.cards) {
      if (!state.jobs.has(id)) { c.el.remove(); state.cards.delete(id); }
    }
    let prev = null;
    for (const id of state.order) {
      const job = state.jobs.get(id);
      if (!job) continue;
      const el = renderJob(job);
      el.hidden = !shownByOpFilter(job);
      const want = prev ? prev.nextSibling : list.firstChild;
      if (want !== el) list.insertBefore(el, want);
      prev = el;
    }
    const shown = state.order.some((id) => shownByOpFilter(state.jobs.get(id)));
    $("jobs-empty").hidden = shown;
    $("jobs-empty").textContent = state.order.length ? "No jobs of the chosen op here."
      : state.filter ? `No ${state.filter} jobs.` : "No jobs yet.";
    $("more").hidden = state.nextOffset === null || state.nextOffset === undefined;
    updateCount();
  }

  function tick() {
    for (const el of document.querySelectorAll(".elapsed[data-since]")) {
      const d = parseTime(el.dataset.since);
      if (d) el.textContent = fmtDuration((Date.now() - d.getTime()) / 1000);
    }
  }

  // ---------- wiring ----------
  function init() {
    setupDrop();
    $("job-form").addEventListener("submit", submitJob);
    $("try-first").addEventListener("click", tryFirst);
    $("abort").addEventListener("click", () => { if (state.xhr) state.xhr.abort(); });
    $("op").addEventListener("change", () => { onOpChange(); savePrefs(); });
    $("preset").addEventListener("change", (e) => applyPreset(e.target.value));
    $("model").addEventListener("change", () => { onModelChange(); savePrefs(); });
    $("scale").addEventListener("change", onScaleChange);
    $("rate").addEventListener("change", onScaleChange);
    $("vae").addEventListener("change", updateSubmit);
    // The server's default overlap depends on the batch size (4 above 8 frames, else none).
    $("batch-frames").addEventListener("input", (e) => {
      const frames = Number(e.target.value);
      $("batch-overlap").placeholder = frames > 0 && frames <= 8 ? "0" : "4";
    });
    for (const id of ["scale", "dtype", "priority", "color-fix"]) $(id).addEventListener("change", savePrefs);
    $("status-filter").addEventListener("change", (e) => {
      state.filter = e.target.value;
      state.loaded = PAGE;
      for (const id of [...state.streams.keys()]) closeStream(id);
      state.jobs = new Map(); state.order = [];
      render();
      poll();
    });
    $("op-filter").addEventListener("change", (e) => { setOpFilter(e.target.value); render(); });
    $("refresh").addEventListener("click", () => { state.streamFailures.clear(); poll(); refreshHealth(); });
    $("more").addEventListener("click", loadMore);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) { poll(); refreshHealth(); } });
    window.addEventListener("beforeunload", (e) => { if (state.xhr) { e.preventDefault(); e.returnValue = ""; } });

    // The op select is kept in this browser, as the form's choices are: one who hides remote calls wants them hidden tomorrow.
    setOpFilter(storedOpFilter());
    setupCompare();
    compareFromHash();
    updateSubmit();
    loadModels();
    loadPresets();
    refreshHealth();
    setInterval(refreshHealth, HEALTH_MS);
    setInterval(tick, 1000);
    poll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
