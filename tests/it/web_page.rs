//! The web page, run by a real headless browser against the real server: its script fills the model
//! list from /v1/models, the header from /healthz and the job list from /v1/jobs. The tests that look at
//! where things are, or at what the page does as a job moves on, drive Chromium over DevTools
//! (`common::browser`) in a window of 1280×900.
use crate::common;

use std::path::Path;
use std::time::Duration;

use common::browser::{png_size, Browser};
use common::*;
use serde_json::{json, Value};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_shows_models_health_and_jobs_from_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=upscale&scale=2&filename=page-check.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;

    let url = server.url("/");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    assert!(dom.contains("<option value=\"realesrgan-x4plus\""), "model list not filled from /v1/models:\n{dom}");
    assert!(dom.contains("<strong>cpu</strong>"), "device not shown from /healthz:\n{dom}");
    assert!(dom.contains("page-check.mp4"), "the job is not listed:\n{dom}");
    assert!(dom.contains(&format!("/v1/jobs/{}/result", job["id"].as_str().unwrap())), "no download link:\n{dom}");
    assert!(dom.contains("Peak device memory"), "timings miss the device peak:\n{dom}");
    // No out-of-memory retry happened (tests/out_of_memory.rs renders one that did): nothing to show.
    assert!(!dom.contains("Out-of-memory fallbacks") && !dom.contains("Row split"), "an empty fallback list is shown:\n{dom}");
}


/// The page's script is ES modules served from a list built into the binary: from the page's entry, every
/// import (followed over HTTP from the real server) resolves to a module served as JavaScript, each module is
/// at most 400 lines, every file in static/js/ is reached (none forgotten, none dead) and an unknown name is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_module_is_served_small_and_reached_from_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let html = client.get(server.url("/")).send().await.unwrap().text().await.unwrap();
    let entries: Vec<String> = html
        .split("<script type=\"module\" src=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_string())
        .collect();
    assert_eq!(entries, ["/js/main.js"], "the page loads one entry module");
    assert!(!html.contains("/static/app.js"), "the page still loads app.js");

    let base = reqwest::Url::parse(&server.url("/")).unwrap();
    let mut pending: Vec<reqwest::Url> = entries.iter().map(|e| base.join(e).unwrap()).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(url) = pending.pop() {
        if !seen.insert(url.path().to_string()) {
            continue;
        }
        let response = client.get(url.clone()).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url} is imported but not served");
        let kind = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/javascript"), "{url} is served as {kind}");
        let source = response.text().await.unwrap();
        let lines = source.lines().count();
        assert!(lines <= 400, "{url} has {lines} lines (at most 400)");
        for specifier in imported_specifiers(&source) {
            pending.push(url.join(&specifier).unwrap_or_else(|e| panic!("{url}: import {specifier:?}: {e}")));
        }
    }
    let files: std::collections::BTreeSet<String> = std::fs::read_dir(Path::new(REPO).join("static/js"))
        .unwrap()
        .map(|entry| format!("/js/{}", entry.unwrap().file_name().to_string_lossy()))
        .collect();
    assert_eq!(seen, files, "the modules reached from the page are not the files in static/js/");

    let response = client.get(server.url("/js/nowhere.js")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not-found", "{body}");
}

/// The specifiers a module imports from: its `import`/`export … from` statements (at the start of a line, up
/// to their `;`) and any `import("…")`.
fn imported_specifiers(source: &str) -> Vec<String> {
    let quoted = |text: &str| -> Option<String> {
        let start = text.find(['"', '\''])?;
        let quote = text[start..].chars().next().unwrap();
        let rest = &text[start + 1..];
        Some(rest[..rest.find(quote)?].to_string())
    };
    let mut specifiers = Vec::new();
    for (at, _) in source.match_indices('\n').map(|(i, m)| (i + 1, m)).chain([(0, "")]) {
        let statement = &source[at..];
        let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
        if statement.starts_with("import ") || statement.starts_with("import{") {
            let after = statement.rfind(" from ").map_or(&statement["import".len()..], |from| &statement[from..]);
            specifiers.extend(quoted(after));
        } else if statement.starts_with("export {") || statement.starts_with("export *") {
            if let Some(from) = statement.rfind(" from ") {
                specifiers.extend(quoted(&statement[from..]));
            }
        }
    }
    for (at, _) in source.match_indices("import(") {
        specifiers.extend(quoted(&source[at + "import(".len()..]));
    }
    specifiers
}

/// Runs the page from the real server at `page` with the network replaced: `fetch` answers with `models`
/// (a real /v1/models listing), the upload's `send` records its form fields, and `driver` plays the user,
/// run once the page is parsed and before its script (its modules) starts. Returns what the upload would
/// have sent, as (name, value) with a file given by its name.
fn fields_the_form_sends(page: &str, models: &Value, driver: &str) -> Vec<(String, String)> {
    let stubs = format!(
        r#"
const MODELS = {models};
window.fetch = async (url) => new Response(JSON.stringify(String(url).startsWith("/v1/models") ? MODELS
  : String(url).startsWith("/v1/presets") ? (window.PRESETS || {{ presets: {{}} }})
  : String(url).startsWith("/v1/jobs") ? {{ jobs: [], next_offset: null }} : {{ status: "ok", device: "cpu" }}),
  {{ status: 200, headers: {{ "Content-Type": "application/json" }} }});
XMLHttpRequest.prototype.open = function () {{}};
XMLHttpRequest.prototype.setRequestHeader = function () {{}};
XMLHttpRequest.prototype.send = function (form) {{
  const sent = [...form.entries()].map(([k, v]) => [k, typeof v === "string" ? v : `file:${{v.name}}`]);
  document.body.dataset.sent = JSON.stringify(sent);
}};
// "interactive": the document is parsed and its deferred scripts (the page's modules) have not run yet.
document.addEventListener("readystatechange", () => {{
  if (document.readyState !== "interactive") return;
{driver}
}});
"#
    );
    let mut browser = Browser::start(WIDTH, HEIGHT);
    browser.before_each_document(&stubs);
    browser.open(page);
    let sent = browser.wait_until("document.body.dataset.sent", Duration::from_secs(15));
    let sent = sent.unwrap_or_else(|| panic!("the form sent nothing:\n{}", browser.eval("document.documentElement.outerHTML")));
    serde_json::from_str(sent.as_str().unwrap()).unwrap()
}

/// The opening tag of the element with this id, as serialised.
fn opening_tag<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no element #{id}"));
    let start = dom[..at].rfind('<').unwrap();
    &dom[start..at + dom[at..].find('>').unwrap() + 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_offers_restore_sends_only_the_filled_fields_and_shows_the_dit_stage() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let (status, listing) = get_json(&client, &server.url("/v1/models")).await;
    assert_eq!(status, 200, "{listing}");

    // The user picks restore, an exact size and a smaller batch, leaves seed, colour fix, overlap and VAE
    // as they are, chooses a file and submits.
    let driver = r#"
const $ = (id) => document.getElementById(id);
const set = (id, value) => { $(id).value = value; $(id).dispatchEvent(new Event("change")); };
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "restore");
  set("scale", "size");
  $("height").value = "96"; $("width").value = "112"; $("batch-frames").value = "5";
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], "restore-check.mp4", { type: "video/mp4" }));
  $("file").files = files.files;
  $("file").dispatchEvent(new Event("change"));
  $("submit").click();
})();"#;
    let (page, models) = (server.url("/"), listing.clone());
    let sent = tokio::task::spawn_blocking(move || fields_the_form_sends(&page, &models, driver)).await.unwrap();
    let expected = [
        ("op", "restore"),
        ("model", "seedvr2-3b-small"),
        ("height", "96"),
        ("width", "112"),
        ("batch_frames", "5"),
        ("priority", "0"),
        ("dtype", "auto"),
        ("file", "file:restore-check.mp4"),
    ];
    assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())), "the form sent other fields");

    // The front-end's options: a short side instead of the scale, padding, latent noise, mirrored frames.
    let driver_options = r#"
const $ = (id) => document.getElementById(id);
const set = (id, value) => { $(id).value = value; $(id).dispatchEvent(new Event("change")); };
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "restore");
  $("resolution").value = "100"; set("fit", "pad"); $("latent-noise-scale").value = "0.1"; $("prepend-frames").value = "2";
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], "options.mp4", { type: "video/mp4" }));
  $("file").files = files.files;
  $("file").dispatchEvent(new Event("change"));
  $("submit").click();
})();"#;
    let (page, models) = (server.url("/"), listing.clone());
    let sent_options = tokio::task::spawn_blocking(move || fields_the_form_sends(&page, &models, driver_options)).await.unwrap();
    let expected_options = [
        ("op", "restore"),
        ("model", "seedvr2-3b-small"),
        ("resolution", "100"),
        ("fit", "pad"),
        ("latent_noise_scale", "0.1"),
        ("prepend_frames", "2"),
        ("priority", "0"),
        ("dtype", "auto"),
        ("file", "file:options.mp4"),
    ];
    assert_eq!(sent_options, expected_options.map(|(k, v)| (k.to_string(), v.to_string())), "the form sent other fields");

    // What the form sends is what the server runs: the same fields, the clip as the body.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let query: Vec<String> = sent.iter().filter(|(k, _)| k != "file").map(|(k, v)| format!("{k}={v}")).collect();
    let job = run_job(&client, &server, &format!("{}&filename=restore-check.mp4", query.join("&")), std::fs::read(&clip).unwrap()).await;

    let url = server.url("/?op=restore");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    assert!(dom.contains("<option value=\"restore\">Restore"), "restore is not offered:\n{dom}");
    assert!(dom.contains("<option value=\"seedvr2-3b-small\">seedvr2-3b-small</option>"), "the DiT is not offered:\n{dom}");
    assert!(dom.contains("<option value=\"seedvr2-vae-small\">seedvr2-vae-small (default)</option>"), "no SeedVR2 VAE:\n{dom}");
    for id in ["vae-field", "restore-advanced"] {
        assert!(!opening_tag(&dom, id).contains("hidden"), "#{id} is hidden for restore: {}", opening_tag(&dom, id));
    }
    assert!(opening_tag(&dom, "size-field").contains("hidden"), "the size inputs show while a scale is chosen");

    assert!(dom.contains("restore-check.mp4"), "the job is not listed:\n{dom}");
    assert!(dom.contains("112×96 area"), "the job's size is not shown:\n{dom}");
    let timings = &job["timings"];
    let secs = |stage: &str| format!("{:.2} s", timings[stage].as_f64().unwrap());
    assert!(dom.contains(&format!("DiT {}", secs("dit"))), "the timings summary misses the DiT stage:\n{dom}");
    let split = dom.split("class=\"stages compute-split\"").nth(1).unwrap_or_else(|| panic!("no compute split:\n{dom}"));
    let split = &split[..split.find("</table>").unwrap()];
    for (label, stage) in [("Encode", "encode"), ("DiT", "dit"), ("Decode", "decode"), ("Colour fix", "color_fix")] {
        assert!(split.contains(&format!("<th scope=\"col\">{label}</th>")), "no {label} column: {split}");
        assert!(split.contains(&format!("<td>{}</td>", secs(stage))), "no {stage} time: {split}");
    }
    let plan = &job["plan"];
    let (height, width) = (plan["output"][0].as_i64().unwrap(), plan["output"][1].as_i64().unwrap());
    assert!(dom.contains(&format!("Restore plan — 1 batch · {width}×{height} out")), "plan summary:\n{dom}");
    assert!(dom.contains(&format!("{} of ≤ 5 frames, {} shared", plan["batches"], plan["batch_overlap"])), "no batches row:\n{dom}");

    // The stages (VAE encode, DiT, VAE decode) as a table with headed columns; no JSON anywhere in the plan.
    let shown = dom.split("Restore plan — ").nth(1).unwrap();
    let shown = &shown[..shown.find("</details>").unwrap()];
    let stages = shown.split("class=\"stages restore-stages\"").nth(1).unwrap_or_else(|| panic!("no table of the stages:\n{shown}"));
    for column in ["Stage", "Runs", "Tiles", "Memory per batch (estimate)", "Fits the budget"] {
        assert!(stages.contains(&format!("<th scope=\"col\">{column}</th>")), "no {column} column: {stages}");
    }
    for stage in ["VAE encode", "DiT", "VAE decode"] {
        assert!(stages.contains(&format!("<th scope=\"row\">{stage}</th>")), "no {stage} row: {stages}");
    }
    let dit = format!("{} · {} blocks · width {}", plan["dit"]["variant"].as_str().unwrap().to_uppercase(), plan["dit"]["blocks"], plan["dit"]["dim"]);
    assert!(stages.contains(&dit), "the DiT row does not say {dit}: {stages}");
    assert!(!shown.contains('{') && !shown.contains("&quot;"), "the plan shows raw JSON: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_offers_interpolate_by_factor_or_rate_and_shows_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, listing) = get_json(&client, &server.url("/v1/models")).await;
    assert_eq!(status, 200, "{listing}");

    // The user picks interpolate, a frame rate instead of a factor, and a scene-cut threshold.
    let driver = r#"
const $ = (id) => document.getElementById(id);
const set = (id, value) => { $(id).value = value; $(id).dispatchEvent(new Event("change")); };
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "interpolate");
  if ($("rate-field").hidden || !$("fps-field").hidden) throw new Error("the rate shows as a factor first");
  set("rate", "fps");
  if ($("fps-field").hidden) throw new Error("no frame-rate input after choosing one");
  $("fps").value = "62.5"; $("scene-threshold").value = "0.2";
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], "interpolate-check.mp4", { type: "video/mp4" }));
  $("file").files = files.files;
  $("file").dispatchEvent(new Event("change"));
  $("submit").click();
})();"#;
    let (page, models) = (server.url("/"), listing.clone());
    let sent = tokio::task::spawn_blocking(move || fields_the_form_sends(&page, &models, driver)).await.unwrap();
    let expected = [
        ("op", "interpolate"),
        ("model", "rife-hdv3"),
        ("fps", "62.5"),
        ("scene_threshold", "0.2"),
        ("priority", "0"),
        ("dtype", "auto"),
        ("file", "file:interpolate-check.mp4"),
    ];
    assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())), "the form sent other fields");

    // "Try first N s" sends the same fields over the clip's first N seconds (here with a webhook).
    let driver_try = r#"
const $ = (id) => document.getElementById(id);
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  $("op").value = "interpolate"; $("op").dispatchEvent(new Event("change"));
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], "try.mp4", { type: "video/mp4" }));
  $("file").files = files.files;
  $("file").dispatchEvent(new Event("change"));
  if ($("try-first").disabled) throw new Error("Try first is disabled with a file chosen");
  $("try-seconds").value = "3";
  $("callback-url").value = "http://hooks.lan:9000/done";
  $("try-first").click();
})();"#;
    let (page, models) = (server.url("/"), listing.clone());
    let sent_try = tokio::task::spawn_blocking(move || fields_the_form_sends(&page, &models, driver_try)).await.unwrap();
    let expected_try =
        [
        ("op", "interpolate"),
        ("model", "rife-hdv3"),
        ("factor", "2"),
        ("priority", "0"),
        ("dtype", "auto"),
        ("callback_url", "http://hooks.lan:9000/done"),
        ("duration", "3"),
        ("file", "file:try.mp4"),
    ];
    assert_eq!(sent_try, expected_try.map(|(k, v)| (k.to_string(), v.to_string())), "Try first sent other fields");

    // A preset fills the form: the op, the model, its rate and threshold; the user only adds the file.
    let driver_preset = r#"
window.PRESETS = { presets: { smooth: { op: "interpolate", factor: "3", scene_threshold: "0.2" } } };
const $ = (id) => document.getElementById(id);
(function drive() {
  if ($("op").disabled || $("preset").options.length < 2) return setTimeout(drive, 50);
  if ($("preset-field").hidden) throw new Error("the preset select is hidden");
  $("preset").value = "smooth"; $("preset").dispatchEvent(new Event("change"));
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], "preset.mp4", { type: "video/mp4" }));
  $("file").files = files.files;
  $("file").dispatchEvent(new Event("change"));
  $("submit").click();
})();"#;
    let (page, models) = (server.url("/"), listing.clone());
    let sent_preset = tokio::task::spawn_blocking(move || fields_the_form_sends(&page, &models, driver_preset)).await.unwrap();
    let expected_preset = [
        ("op", "interpolate"),
        ("model", "rife-hdv3"),
        ("factor", "3"),
        ("scene_threshold", "0.2"),
        ("priority", "0"),
        ("dtype", "auto"),
        ("file", "file:preset.mp4"),
    ];
    assert_eq!(sent_preset, expected_preset.map(|(k, v)| (k.to_string(), v.to_string())), "the preset did not fill the form");

    // What the form sends is what the server runs; the card shows the plan in words.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("bikes.mp4"), 3, false, &clip);
    let query: Vec<String> = sent.iter().filter(|(k, _)| k != "file").map(|(k, v)| format!("{k}={v}")).collect();
    let job = run_job(&client, &server, &format!("{}&filename=interpolate-check.mp4", query.join("&")), std::fs::read(&clip).unwrap()).await;
    let made = job["plan"]["interpolated"].as_u64().unwrap();
    let url = server.url("/?op=interpolate");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    assert!(dom.contains("<option value=\"interpolate\">Interpolate"), "interpolate is not offered:\n{dom}");
    let summary = format!("Interpolation plan — 25 fps → 62.5 fps · {made} frames made · 0 scene cuts");
    assert!(dom.contains(&summary), "no {summary:?}:\n{dom}");
    let shown = dom.split("Interpolation plan — ").nth(1).unwrap();
    let shown = &shown[..shown.find("</details>").unwrap()];
    assert!(shown.contains("<td>none</td>") && !shown.contains('[') && !shown.contains("&quot;"), "the plan shows raw JSON: {shown}");
}

// ---------- in a window, over DevTools ----------

/// Opens the page and waits until its script filled the form from /v1/models.
fn open_page(browser: &mut Browser, url: &str) {
    browser.open(url);
    browser.wait_until("!document.getElementById('op').disabled", Duration::from_secs(15)).unwrap_or_else(|| panic!("the form was not filled at {url}"));
}

/// A value as a JavaScript literal.
fn js(value: impl serde::Serialize) -> String {
    serde_json::to_string(&value).unwrap()
}

/// An element's box in the window, in CSS pixels (here device pixels too).
#[derive(Debug)]
struct Rect {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

impl Rect {
    fn of(browser: &mut Browser, selector: &str) -> Rect {
        let r = browser.eval(&format!("(() => {{ const r = document.querySelector({}).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }})()", js(selector)));
        let side = |i: usize| r[i].as_f64().unwrap_or_else(|| panic!("no box for {selector}: {r}"));
        Rect { left: side(0), top: side(1), right: side(2), bottom: side(3) }
    }

    fn height(&self) -> f64 {
        self.bottom - self.top
    }

    fn inside_window(&self) -> bool {
        self.left >= 0.0 && self.top >= 0.0 && self.right <= WIDTH as f64 && self.bottom <= HEIGHT as f64
    }
}

/// Whether the element is what the window shows at its own centre: in view, and neither clipped by a
/// scrolling parent nor covered.
fn shown_at_its_centre(browser: &mut Browser, selector: &str) -> bool {
    let script = format!(
        "(() => {{ const el = document.querySelector({}); const r = el.getBoundingClientRect();
           const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2); return !!hit && el.contains(hit); }})()",
        js(selector)
    );
    browser.eval(&script) == json!(true)
}

/// Picks `op` in the form, as the user does.
fn choose_op(browser: &mut Browser, op: &str) {
    browser.eval(&format!("(() => {{ const op = document.getElementById('op'); op.value = {}; op.dispatchEvent(new Event('change')); }})()", js(op)));
}

/// The form at its tallest: restore with an exact size, Advanced open, a file chosen, and an error shown
/// (submitted without the size), at 1280×900. The panel is no taller than the window, and the submit
/// button and the error are in view: by their boxes, by what the window shows at their centres, and in a
/// screenshot, where the button's colour is found where its box says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_panel_keeps_its_submit_button_and_error_in_view_at_its_tallest() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    choose_op(&mut browser, "restore");
    browser.eval(
        r#"(() => {
  const $ = (id) => document.getElementById(id);
  $("scale").value = "size"; $("scale").dispatchEvent(new Event("change"));
  $("restore-advanced").open = true;
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], "tall-form.mp4", { type: "video/mp4" }));
  $("file").files = files.files; $("file").dispatchEvent(new Event("change"));
  $("submit").click();
})()"#,
    );
    let error = browser.wait_until("!document.getElementById('form-error').hidden && document.getElementById('form-error').textContent", Duration::from_secs(5));
    assert!(error.as_ref().is_some_and(|e| e.as_str().unwrap().contains("height and width")), "no error for the missing size: {error:?}");

    let panel = Rect::of(&mut browser, "section[aria-labelledby='new-heading']");
    assert!(panel.height() <= HEIGHT as f64 && panel.bottom <= HEIGHT as f64, "the panel is taller than the window: {panel:?}");
    for (what, selector) in [("submit button", "#submit"), ("error", "#form-error")] {
        let shown = Rect::of(&mut browser, selector);
        assert!(shown.inside_window(), "the {what} is outside the window: {shown:?}");
        assert!(shown_at_its_centre(&mut browser, selector), "the {what} is hidden (clipped or covered) at {shown:?}");
    }

    let png = dir.path().join("tall-form.png");
    browser.screenshot(&png);
    assert_eq!(png_size(&png), (WIDTH, HEIGHT), "the screenshot is not of the window");
    let button = Rect::of(&mut browser, "#submit");
    let colour = browser.eval("getComputedStyle(document.getElementById('submit')).backgroundColor");
    let expected = colour_channels(colour.as_str().unwrap());
    // Left of the label, in the button's fill.
    let (x, y) = ((button.left + 8.0) as usize, ((button.top + button.bottom) / 2.0) as usize);
    let pixels = rgb_frames(&std::fs::read(&png).unwrap(), &png);
    let at = (y * WIDTH as usize + x) * 3;
    let seen = [pixels[at], pixels[at + 1], pixels[at + 2]];
    let near = seen.iter().zip(expected).all(|(&s, e)| (s as i32 - e as i32).abs() <= 12);
    assert!(near, "the screenshot shows {seen:?} at ({x}, {y}), not the button's {expected:?}");
}

/// `rgb(36, 88, 211)` as its channels.
fn colour_channels(css: &str) -> [u8; 3] {
    let inner = css.trim_start_matches("rgba(").trim_start_matches("rgb(").trim_end_matches(')');
    let channels: Vec<u8> = inner.split(',').take(3).map(|c| c.trim().parse().unwrap()).collect();
    [channels[0], channels[1], channels[2]]
}

/// For every op, the Operation, Model and VAE selects are wide enough for each of their options' labels
/// (model names, with "(default)" or "(not installed)"): the width is what Chromium gives a copy of the
/// select sized to its content (`field-sizing: content`, arrow and padding included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selects_show_every_model_name_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let (_, listing) = get_json(&client(), &server.url("/v1/models")).await;
    let longest = listing["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().to_string()).max_by_key(|name| name.chars().count()).unwrap();

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let ops: Vec<String> = serde_json::from_value(browser.eval("[...document.getElementById('op').options].map((o) => o.value)")).unwrap();
    let mut measured = Vec::new();
    for op in &ops {
        choose_op(&mut browser, op);
        let widths = browser.eval(
            r#"(() => {
  const out = [];
  for (const id of ["op", "model", "vae"]) {
    const select = document.getElementById(id);
    if (select.closest("[hidden]")) continue;
    const probe = select.cloneNode(true);
    probe.removeAttribute("id");
    Object.assign(probe.style, { fieldSizing: "content", width: "auto", minWidth: "0", maxWidth: "none", position: "absolute", visibility: "hidden" });
    select.after(probe);
    for (const option of select.options) {
      probe.value = option.value;
      out.push({ select: id, label: option.text, needs: probe.getBoundingClientRect().width, has: select.getBoundingClientRect().width });
    }
    probe.remove();
  }
  return out;
})()"#,
        );
        measured.extend(widths.as_array().unwrap().iter().cloned());
    }
    let cut: Vec<&Value> = measured.iter().filter(|m| m["needs"].as_f64().unwrap() > m["has"].as_f64().unwrap() + 0.5).collect();
    assert!(cut.is_empty(), "selects too narrow for their options: {cut:#?}");
    assert!(measured.iter().any(|m| m["label"].as_str().unwrap().contains(&longest)), "{longest} was never offered: {measured:#?}");
}

/// A box that takes jobs and runs none until a worker (`start_worker`) joins it: jobs wait as long as a
/// test needs them to.
fn queue_only_server(dir: &Path) -> Server {
    Server::start(dir, &[("VAEBOX_ROLE", "api")])
}

/// A worker on the CPU (with the tests' two threads): a job takes about as long on any box, GPU or not.
fn start_worker(dir: &Path) -> WorkerProcess {
    WorkerProcess::start(dir, "page-worker", &[("VAEBOX_DEVICE", "cpu")], None)
}

async fn queue_upscale(client: &reqwest::Client, server: &Server, clip: &Path, name: &str, priority: i64) -> String {
    let query = format!("op=upscale&scale=2&priority={priority}&filename={name}");
    let (status, job) = upload_raw(client, server, &query, std::fs::read(clip).unwrap()).await;
    assert_eq!((status, job["status"].as_str()), (202, Some("queued")), "{job}");
    job["id"].as_str().unwrap().to_string()
}

/// The text of a job's queue place on its card, once it shows one.
fn place_on_card(browser: &mut Browser, id: &str) -> String {
    let place = browser.wait_until(&format!("(document.querySelector({}) || {{}}).textContent", js(format!("#job-{id} .queue-place"))), Duration::from_secs(15));
    place.unwrap_or_else(|| panic!("the card of {id} shows no queue place")).as_str().unwrap().to_string()
}

/// Seconds from a job's start to its end, as the server recorded them.
fn run_seconds(job: &Value) -> f64 {
    let time = |key: &str| chrono::DateTime::parse_from_rfc3339(job[key].as_str().unwrap()).unwrap();
    (time("finished_at") - time("started_at")).num_milliseconds() as f64 / 1000.0
}

/// Queued cards say their place in the order workers claim jobs (priority, then first come), and a wait
/// only where there is a basis for one: none while no worker and no finished job is known; then, after a
/// worker ran three (and is still listed by /healthz, as for a lease after it stopped), the next job
/// "starts next" and the one after it waits about the median of their run times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_cards_show_their_place_and_a_wait_once_there_is_a_basis() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = queue_only_server(dir.path());
    let client = client();
    let first = queue_upscale(&client, &server, &clip, "first.mp4", 0).await;
    let second = queue_upscale(&client, &server, &clip, "second.mp4", 0).await;
    let urgent = queue_upscale(&client, &server, &clip, "urgent.mp4", 3).await;

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    // Priority first, then first come; no wait guessed with no worker and no finished job to go by.
    for (name, id, position) in [("urgent", &urgent, 1), ("first", &first, 2), ("second", &second, 3)] {
        let place = place_on_card(&mut browser, id);
        assert_eq!(place, format!("queued — position {position}"), "the {name} job's place");
    }

    let mut worker = start_worker(dir.path());
    let mut runs = Vec::new();
    for id in [&urgent, &first, &second] {
        let job = wait_for_final(&client, &server, id, Duration::from_secs(120)).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        runs.push(run_seconds(&job));
    }
    worker.kill9();
    runs.sort_by(f64::total_cmp);
    let median = runs[1];

    let next = queue_upscale(&client, &server, &clip, "next.mp4", 0).await;
    let after = queue_upscale(&client, &server, &clip, "after.mp4", 0).await;
    let place = place_on_card(&mut browser, &next);
    assert_eq!(place, "queued — position 1 · starts next");
    let place = place_on_card(&mut browser, &after);
    let waits: f64 = place.strip_prefix("queued — position 2 · starts in about ").and_then(|s| s.strip_suffix('s')).unwrap_or_else(|| panic!("no wait on the second queued card: {place}")).parse().unwrap();
    // The page rounds to whole seconds, and says at least 1 s behind another job.
    assert!((waits - median.max(1.0)).abs() <= 0.5 + 1e-9, "waits {waits} s, the median run is {median} s ({runs:?})");
}

/// The header says which job runs and stops saying so when it ended, and the card's thumbnail turns from
/// the input's still (176 px wide) to the output's (capped at 320 px), without a reload. The header's own
/// timer is stopped (as a background tab slows it to once a minute), so only following the job can do it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_thumbnail_follow_a_job_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough (several seconds) for the page, which polls the list every 3 s, to see it running.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 60, false, &clip);
    let server = queue_only_server(dir.path());
    let client = client();
    let id = queue_upscale(&client, &server, &clip, "followed.mp4", 0).await;

    let mut browser = Browser::start(WIDTH, HEIGHT);
    browser.before_each_document(
        "const everyInterval = window.setInterval;
         window.setInterval = (call, ms, ...rest) => (call && call.name === 'refreshHealth' ? 0 : everyInterval(call, ms, ...rest));",
    );
    open_page(&mut browser, &server.url("/"));
    // Every text the header shows from now on.
    browser.eval(
        "window.headerTexts = [];
         const header = document.getElementById('health-text');
         new MutationObserver(() => headerTexts.push(header.textContent)).observe(header, { childList: true, subtree: true, characterData: true });",
    );
    let thumbnail = format!("document.querySelector({})", js(format!("#job-{id} img.thumb")));
    let loaded = format!("{thumbnail} && {thumbnail}.complete && {thumbnail}.naturalWidth");
    let width = browser.wait_until(&loaded, Duration::from_secs(15));
    assert_eq!(width, Some(json!(176)), "the queued job's card does not show the input's still");

    let _worker = start_worker(dir.path());
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(180)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let card_done = format!("document.getElementById({}).classList.contains('st-succeeded')", js(format!("job-{id}")));
    assert!(browser.wait_until(&card_done, Duration::from_secs(15)).is_some(), "the card did not turn succeeded");
    let width = browser.wait_until(&loaded, Duration::from_secs(10));
    assert_eq!(width, Some(json!(320)), "the finished card's thumbnail is not the output's still (320 px wide)");
    assert_eq!(browser.eval(&format!("{thumbnail}.dataset.side")), json!("output"));

    let short = &id[..8];
    let texts = browser.eval("headerTexts");
    let said_running = texts.as_array().unwrap().iter().any(|t| t.as_str().unwrap().contains(&format!("running {short}")));
    assert!(said_running, "the header never said the job was running: {texts}");
    let over = format!("!document.getElementById('health-text').textContent.includes('running') && !document.querySelector('#health-text a[href=\"#job-{id}\"]')");
    let header = browser.wait_until(&over, Duration::from_secs(5));
    assert!(header.is_some(), "the header still names the job after it ended: {}", browser.eval("document.getElementById('health-text').textContent"));
}

/// The before/after view of a finished upscale: the address names it and opens it again on a reload; its
/// seek bar moves both videos; a frame step moves both by one frame at the job's frame rate and leaves them
/// paused; 1:1 shows the picture at its own displayed size (pixel aspect applied), and the fitted view keeps
/// that shape; closing it clears the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_view_follows_the_address_seeks_steps_frames_and_shows_1_to_1() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let job = run_job(&client, &server, "op=upscale&scale=2&filename=compare.mp4", std::fs::read(&clip).unwrap()).await;
    let id = job["id"].as_str().unwrap();
    let fps = job["output"]["media"]["fps"].as_f64().unwrap();

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let button = format!("document.querySelector({})", js(format!("#job-{id} .job-actions button[aria-label^='Compare']")));
    assert!(browser.wait_until(&button, Duration::from_secs(15)).is_some(), "no Compare button on the card");
    browser.eval(&format!("{button}.click()"));
    wait_for_both_videos(&mut browser);
    assert_eq!(browser.eval("location.hash"), json!(format!("#compare={id}")));

    // Fitted: the picture's shape (its displayed size's).
    let sizes = browser.eval("(() => { const v = document.getElementById('compare-after'); const r = v.getBoundingClientRect(); return [v.videoWidth, v.videoHeight, r.width, r.height]; })()");
    let [natural_w, natural_h, shown_w, shown_h] = [0, 1, 2, 3].map(|i| sizes[i].as_f64().unwrap());
    assert!((shown_w / shown_h - natural_w / natural_h).abs() < 0.01, "the fitted view changes the picture's shape: {sizes}");

    let times = "['compare-before', 'compare-after'].map((id) => document.getElementById(id).currentTime)";
    browser.eval("(() => { const seek = document.getElementById('compare-seek'); seek.value = '0.05'; seek.dispatchEvent(new Event('input')); })()");
    assert_eq!(browser.eval(times), json!([0.05, 0.05]), "the seek bar did not move both videos");

    // Stepping from playback: it stops both.
    browser.eval("document.getElementById('compare-play').click()");
    let playing = "['compare-before', 'compare-after'].every((id) => !document.getElementById(id).paused)";
    assert!(browser.wait_until(playing, Duration::from_secs(5)).is_some(), "Play did not start both videos");
    browser.eval("document.getElementById('compare-next').click()");
    let paused = browser.eval("['compare-before', 'compare-after'].every((id) => document.getElementById(id).paused)");
    assert_eq!(paused, json!(true), "a frame step leaves the videos playing");
    // From the first frame (playback may have reached the last, where a step on has nowhere to go): one on, one back.
    browser.eval("(() => { const seek = document.getElementById('compare-seek'); seek.value = '0'; seek.dispatchEvent(new Event('input')); })()");
    browser.eval("document.getElementById('compare-next').click()");
    let ahead = browser.eval(times);
    browser.eval("document.getElementById('compare-prev').click()");
    let back = browser.eval(times);
    let (ahead, back) = (ahead[1].as_f64().unwrap(), back[1].as_f64().unwrap());
    assert!(((ahead - back) - 1.0 / fps).abs() < 1e-3, "one frame at {fps} fps is not {} s: {ahead} then {back}", ahead - back);
    assert_eq!(browser.eval(times), json!([back, back]), "the videos are not in step");

    browser.eval("document.getElementById('compare-zoom').click()");
    for side in ["compare-before", "compare-after"] {
        let sizes = browser.eval(&format!("(() => {{ const v = document.getElementById('{side}'); const r = v.getBoundingClientRect(); return [v.videoWidth, v.videoHeight, r.width, r.height]; }})()"));
        assert_eq!((sizes[2].as_f64(), sizes[3].as_f64()), (sizes[0].as_f64(), sizes[1].as_f64()), "#{side} at 1:1 is not its own size: {sizes}");
    }

    browser.reload();
    let reopened = format!("document.getElementById('compare').open && document.getElementById('compare-after').src.includes({})", js(id));
    assert!(browser.wait_until(&reopened, Duration::from_secs(10)).is_some(), "the address did not open the view again");
    wait_for_both_videos(&mut browser);
    browser.eval("document.getElementById('compare-close').click()");
    assert_eq!(browser.eval("[location.hash, document.getElementById('compare').open]"), json!(["", false]), "closing left the address");
}

fn wait_for_both_videos(browser: &mut Browser) {
    let ready = "['compare-before', 'compare-after'].every((id) => document.getElementById(id).readyState >= 2)";
    assert!(browser.wait_until(ready, Duration::from_secs(60)).is_some(), "the previews did not load");
}


// ---------- keeping the file, a narrower window, the plan in words, the op filter, stills ----------

/// The narrowest window the two-column layout is made for: the form's column keeps its width, the jobs get the rest.
const NARROW_WIDTH: u32 = 1024;
const NARROW_HEIGHT: u32 = 800;

/// Puts `bytes` into the form's file input as the file `name`, as choosing it does.
fn choose_file(browser: &mut Browser, name: &str, bytes: &[u8]) {
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    browser.eval(&format!(
        r#"(() => {{
  const bytes = Uint8Array.from(atob({}), (c) => c.charCodeAt(0));
  const files = new DataTransfer();
  files.items.add(new File([bytes], {}, {{ type: "video/mp4" }}));
  const input = document.getElementById("file");
  input.files = files.files;
  input.dispatchEvent(new Event("change"));
}})()"#,
        js(encoded),
        js(name)
    ));
}

/// How many cards are titled `name`.
fn cards_titled(name: &str) -> String {
    format!("[...document.querySelectorAll('.job-title')].filter((t) => t.textContent === {}).length", js(name))
}

/// After a successful submit the form still holds the file: the input has it, the drop zone names it and
/// Submit is enabled, so another setting is one click away; and that click sends the same file again (a
/// second job with the file's name and every one of its bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_keeps_its_file_after_a_submit_and_sends_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let bytes = std::fs::read(&clip).unwrap();
    // No worker: the jobs wait in the queue, nothing runs.
    let server = queue_only_server(dir.path());

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    choose_op(&mut browser, "upscale");
    choose_file(&mut browser, "again.mp4", &bytes);
    browser.eval("document.getElementById('submit').click()");
    let first = browser.wait_until(&format!("{} === 1", cards_titled("again.mp4")), Duration::from_secs(30));
    assert!(first.is_some(), "the first job's card did not show: {}", browser.eval("document.getElementById('form-error').textContent"));

    let form = browser.eval(
        "(() => { const $ = (id) => document.getElementById(id); const files = $('file').files;
           return { file: files.length ? [files[0].name, files[0].size] : null,
                    named: !$('file-info').hidden && $('file-info').textContent.includes('again.mp4'),
                    dropzone: $('dropzone').classList.contains('has-file'), submit_enabled: !$('submit').disabled }; })()",
    );
    let kept = json!({ "file": ["again.mp4", bytes.len()], "named": true, "dropzone": true, "submit_enabled": true });
    assert_eq!(form, kept, "the form let go of the file after the submit");

    browser.eval("document.getElementById('submit').click()");
    let second = browser.wait_until(&format!("{} === 2", cards_titled("again.mp4")), Duration::from_secs(30));
    assert!(second.is_some(), "Submit did not send the kept file again: {}", browser.eval("document.getElementById('form-error').textContent"));
    let (_, listed) = get_json(&client(), &server.url("/v1/jobs")).await;
    let sent: Vec<(Value, Value)> = listed["jobs"].as_array().unwrap().iter().map(|j| (j["input"]["file_name"].clone(), j["input"]["bytes"].clone())).collect();
    assert_eq!(sent, vec![(json!("again.mp4"), json!(bytes.len())); 2], "the server did not get the file twice: {listed}");
}

/// At 1024 px a succeeded try's card (Download, Run the whole clip, Compare and Delete) keeps its title
/// readable: at most two lines, not a letter per line beside the buttons; every button stays inside the
/// card and the page does not scroll sideways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_cards_keep_a_readable_title_beside_four_buttons_at_1024_px() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 8, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let job = run_job(&client(), &server, "op=upscale&scale=2&duration=0.2&filename=try-at-1024.mp4", std::fs::read(&clip).unwrap()).await;
    let card = format!("#job-{}", job["id"].as_str().unwrap());

    let mut browser = Browser::start(NARROW_WIDTH, NARROW_HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let four = format!("document.querySelectorAll({}).length === 4", js(format!("{card} .job-actions > *")));
    assert!(browser.wait_until(&four, Duration::from_secs(15)).is_some(), "the try's card does not show four buttons");
    let labels = browser.eval(&format!("[...document.querySelectorAll({})].map((b) => b.textContent)", js(format!("{card} .job-actions > *"))));
    assert_eq!(labels, json!(["Download", "Run the whole clip", "Compare", "Delete"]));

    let title = Rect::of(&mut browser, &format!("{card} .job-title"));
    let line = browser.eval(&format!("parseFloat(getComputedStyle(document.querySelector({})).lineHeight)", js(format!("{card} .job-title"))));
    let line = line.as_f64().unwrap();
    assert!(title.height() <= 2.0 * line + 1.0, "the title takes {} px, {} lines of {line} px: {title:?}", title.height(), title.height() / line);
    let outer = Rect::of(&mut browser, &card);
    for i in 1..=4 {
        let button = Rect::of(&mut browser, &format!("{card} .job-actions > :nth-child({i})"));
        assert!(button.left >= outer.left && button.right <= outer.right, "button {i} sticks out of the card: {button:?} in {outer:?}");
    }
    let page_width = browser.eval("document.documentElement.scrollWidth").as_f64().unwrap();
    assert!(page_width <= NARROW_WIDTH as f64, "the page is {page_width} px wide in a {NARROW_WIDTH} px window");
}

/// At 1024 px the Output select is wide enough for each of its options' labels (measured as
/// `selects_show_every_model_name_in_full` does) and lies inside the form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_select_shows_every_format_in_full_at_1024_px() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut browser = Browser::start(NARROW_WIDTH, NARROW_HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let measured = browser.eval(
        r#"(() => {
  const select = document.getElementById("output-format");
  const probe = select.cloneNode(true);
  probe.removeAttribute("id");
  Object.assign(probe.style, { fieldSizing: "content", width: "auto", minWidth: "0", maxWidth: "none", position: "absolute", visibility: "hidden" });
  select.after(probe);
  const has = select.getBoundingClientRect().width;
  const options = [...select.options].map((option) => { probe.value = option.value; return { label: option.text, needs: probe.getBoundingClientRect().width, has }; });
  probe.remove();
  return { options, scroll: [select.scrollWidth, select.clientWidth] };
})()"#,
    );
    let options = measured["options"].as_array().unwrap();
    assert!(options.len() >= 7, "{measured}");
    let cut: Vec<&Value> = options.iter().filter(|m| m["needs"].as_f64().unwrap() > m["has"].as_f64().unwrap() + 0.5).collect();
    assert!(cut.is_empty(), "the Output select cuts off: {cut:#?}");
    let (scroll, inner) = (measured["scroll"][0].as_f64().unwrap(), measured["scroll"][1].as_f64().unwrap());
    assert!(scroll <= inner + 1.0, "the select's text overflows it: {measured}");
    let (select, form) = (Rect::of(&mut browser, "#output-format"), Rect::of(&mut browser, "#job-form"));
    assert!(select.left >= form.left && select.right <= form.right, "the select sticks out of the form: {select:?} in {form:?}");
}

/// A restore's plan names every row in words, as the form does ("Fit", "Padding", "Mirrored lead frames",
/// "Input noise", "Latent noise"): no row is headed by one of the plan's own keys, and no value is JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_plan_names_every_row_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let query = "op=restore&model=seedvr2-3b-small&height=96&width=112&batch_frames=5&batch_overlap=2&seed=7&filename=clip.mp4";
    let job = run_job(&client(), &server, query, std::fs::read(&clip).unwrap()).await;
    let id = job["id"].as_str().unwrap();
    let keys: Vec<&String> = job["plan"].as_object().expect("a restore plan").keys().collect();
    for key in ["fit", "padding", "prepend_frames", "input_noise_scale", "latent_noise_scale"] {
        assert!(keys.iter().any(|k| *k == key), "the plan has no {key}: {}", job["plan"]);
    }

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let rows = format!(
        "(() => {{ const plan = [...document.querySelectorAll({})].find((d) => d.querySelector('summary').textContent.startsWith('Restore plan'));
           return plan && [...plan.querySelectorAll('table.kv > tbody > tr')].map((tr) => [tr.querySelector('th').textContent, tr.querySelector('td').textContent]); }})()",
        js(format!("#job-{id} details.block"))
    );
    let rows = browser.wait_until(&rows, Duration::from_secs(15)).unwrap_or_else(|| panic!("the card shows no restore plan"));
    let rows: Vec<(String, String)> = serde_json::from_value(rows).unwrap();
    let raw: Vec<&(String, String)> = rows.iter().filter(|(head, _)| keys.iter().any(|k| *k == head) || head.contains('_') || !head.starts_with(|c: char| c.is_uppercase())).collect();
    assert!(raw.is_empty(), "rows headed by the plan's keys: {raw:?}\nall rows: {rows:?}");
    for label in ["Fit", "Padding", "Mirrored lead frames", "Input noise", "Latent noise"] {
        assert!(rows.iter().any(|(head, _)| head == label), "no {label} row: {rows:?}");
    }
    let json_values: Vec<&(String, String)> = rows.iter().filter(|(_, value)| value.starts_with(['[', '{'])).collect();
    assert!(json_values.is_empty(), "values shown as JSON: {json_values:?}");
}

/// Whether the card of job `id` takes up room on the page (a hidden card has no box).
fn card_shown(browser: &mut Browser, id: &str) -> bool {
    browser.eval(&format!("document.getElementById({}).getClientRects().length > 0", js(format!("job-{id}")))) == json!(true)
}

/// Chooses `value` in the job list's op select, as the user does.
fn filter_ops(browser: &mut Browser, value: &str) {
    browser.eval(&format!("(() => {{ const f = document.getElementById('op-filter'); f.value = {}; f.dispatchEvent(new Event('change')); }})()", js(value)));
}

/// The job list's op select hides synchronous remote VAE calls (a `/v1/decode` call's job, its result
/// returned and not kept) and keeps the jobs sent by hand, an ordinary VAE encode included; it shows the
/// remote calls alone, or one op only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_op_filter_hides_remote_vae_calls() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    std::os::unix::fs::symlink(Path::new(REPO).join("models/realesrgan"), models.join("realesrgan")).unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let latent = vec![0u8; 16 * 2 * 2 * 4];
    let response = client.post(server.url("/v1/decode?model=wan21-small&shape=1&shape=16&shape=1&shape=2&shape=2&dtype=float32")).body(latent).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let remote = response.headers()["x-vaebox-job"].to_str().unwrap().to_string();
    let (_, remote_job) = get_json(&client, &server.url(&format!("/v1/jobs/{remote}"))).await;
    assert_eq!(remote_job["output"]["kept"], json!(false), "the call's result is still kept: {remote_job}");
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let upscale = run_job(&client, &server, "op=upscale&scale=2&filename=by-hand.mp4", std::fs::read(&clip).unwrap()).await;
    let encode = run_job(&client, &server, "op=vae_encode&model=wan21-small&filename=encode-by-hand.mp4", std::fs::read(&clip).unwrap()).await;
    let (upscale, encode) = (upscale["id"].as_str().unwrap(), encode["id"].as_str().unwrap());

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let remote = remote.as_str();
    let all_listed = [remote, upscale, encode].map(|id| format!("document.getElementById({})", js(format!("job-{id}")))).join(" && ");
    assert!(browser.wait_until(&all_listed, Duration::from_secs(15)).is_some(), "the three jobs are not all listed");
    let shown = |browser: &mut Browser| [remote, upscale, encode].map(|id| card_shown(browser, id));
    assert_eq!(shown(&mut browser), [true, true, true], "a card is hidden with no filter chosen");

    filter_ops(&mut browser, "not-remote");
    assert_eq!(shown(&mut browser), [false, true, true], "without remote calls: [remote call, upscale, VAE encode] shown");
    filter_ops(&mut browser, "remote");
    assert_eq!(shown(&mut browser), [true, false, false], "remote calls only: [remote call, upscale, VAE encode] shown");
    filter_ops(&mut browser, "upscale");
    assert_eq!(shown(&mut browser), [false, true, false], "upscale only: [remote call, upscale, VAE encode] shown");
    filter_ops(&mut browser, "");
    assert_eq!(shown(&mut browser), [true, true, true], "all ops: [remote call, upscale, VAE encode] shown");
}

/// A 64 × 48 PNG cut from a real photograph (scikit-image's astronaut).
fn small_png(out: &Path) {
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("astronaut.png"))
        .args(["-vf", "crop=64:48:180:60", "-pix_fmt", "rgb24"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not cut the picture");
}

const PLAYBACK_CONTROLS: [&str; 4] = ["compare-play", "compare-seek", "compare-prev", "compare-next"];

/// Which of Play, the seek bar and the two frame steps the window shows (a hidden one has no box).
fn playback_shown(browser: &mut Browser) -> Value {
    browser.eval(&format!("{}.map((id) => document.getElementById(id).getClientRects().length > 0)", js(PLAYBACK_CONTROLS)))
}

/// A still picture's card says "picture", not "1 frames"; its before/after view has no Play, seek bar or
/// frame steps (one frame has nothing to play or step through) while the split still moves the cut; a
/// video's view, opened after it, has them all again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_shows_a_still_without_playback_controls() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("face.png");
    small_png(&png);
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let still = run_job(&client, &server, "op=upscale&scale=2&filename=face.png", std::fs::read(&png).unwrap()).await;
    assert_eq!(still["input"]["media"]["still"], json!(true), "{still}");
    let video = run_job(&client, &server, "op=upscale&scale=2&filename=video.mp4", std::fs::read(&clip).unwrap()).await;
    let (still, video) = (still["id"].as_str().unwrap(), video["id"].as_str().unwrap());

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let compare = |id: &str| format!("document.querySelector({})", js(format!("#job-{id} .job-actions button[aria-label^='Compare']")));
    assert!(browser.wait_until(&format!("{} && {}", compare(still), compare(video)), Duration::from_secs(15)).is_some(), "no Compare buttons");
    let facts = browser.eval(&format!("document.querySelector({}).textContent", js(format!("#job-{still} .facts"))));
    let facts = facts.as_str().unwrap();
    assert!(facts.contains("picture") && !facts.contains("1 frames"), "the still's card: {facts}");

    browser.eval(&format!("{}.click()", compare(still)));
    wait_for_both_videos(&mut browser);
    assert_eq!(playback_shown(&mut browser), json!([false, false, false, false]), "a still's view shows {PLAYBACK_CONTROLS:?}");
    assert!(shown_at_its_centre(&mut browser, "#compare-split"), "the still's view has no split");
    browser.eval("(() => { const split = document.getElementById('compare-split'); split.value = '30'; split.dispatchEvent(new Event('input')); })()");
    let cut = browser.eval("[document.getElementById('compare-after').style.clipPath, document.getElementById('compare-divider').style.left]");
    assert_eq!(cut, json!(["inset(0px 0px 0px 30%)", "30%"]), "the split did not move the cut");

    browser.eval("document.getElementById('compare-close').click()");
    browser.eval(&format!("{}.click()", compare(video)));
    wait_for_both_videos(&mut browser);
    assert_eq!(playback_shown(&mut browser), json!([true, true, true, true]), "a video's view after a still's lacks some of {PLAYBACK_CONTROLS:?}");
}
