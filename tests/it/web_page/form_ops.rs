//! What the submit form sends for an op (restore, interpolate; Try first, a preset), with the network
//! stubbed, and what the card then shows of the job the server ran from those fields: its plan and timings.

use crate::common;

use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::Value;

use super::{HEIGHT, WIDTH};

/// Runs the page from the real server at `page` with the network replaced: `fetch` answers with `models`
/// (a real /v1/models listing), the upload's `send` records its form fields, and `driver` plays the user,
/// run once the page is parsed and before its script (its modules) starts, with `$`, `set` and `chooseFile`
/// at hand. Returns what the upload would have sent, as (name, value) with a file given by its name.
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
// What every driver uses: an element by id, a value set as the user's change, a file chosen.
const $ = (id) => document.getElementById(id);
const set = (id, value) => {{ $(id).value = value; $(id).dispatchEvent(new Event("change")); }};
const chooseFile = (name) => {{
  const files = new DataTransfer();
  files.items.add(new File(["not a video"], name, {{ type: "video/mp4" }}));
  $("file").files = files.files;
  $("file").dispatchEvent(new Event("change"));
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
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "restore");
  set("scale", "size");
  $("height").value = "96"; $("width").value = "112"; $("batch-frames").value = "5";
  chooseFile("restore-check.mp4");
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
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "restore");
  $("resolution").value = "100"; set("fit", "pad"); $("latent-noise-scale").value = "0.1"; $("prepend-frames").value = "2";
  chooseFile("options.mp4");
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

    // The user picks interpolate, a frame rate instead of a factor, a scene-cut threshold, and the encoder's quality and speed.
    let driver = r#"
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "interpolate");
  if ($("rate-field").hidden || !$("fps-field").hidden) throw new Error("the rate shows as a factor first");
  set("rate", "fps");
  if ($("fps-field").hidden) throw new Error("no frame-rate input after choosing one");
  $("fps").value = "62.5"; $("scene-threshold").value = "0.2";
  $("crf").value = "23"; $("encoder-preset").value = "slow";
  chooseFile("interpolate-check.mp4");
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
        ("crf", "23"),
        ("encoder_preset", "slow"),
        ("file", "file:interpolate-check.mp4"),
    ];
    assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())), "the form sent other fields");

    // "Try first N s" sends the same fields over the clip's first N seconds (here with a webhook).
    let driver_try = r#"
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  $("op").value = "interpolate"; $("op").dispatchEvent(new Event("change"));
  chooseFile("try.mp4");
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
(function drive() {
  if ($("op").disabled || $("preset").options.length < 2) return setTimeout(drive, 50);
  if ($("preset-field").hidden) throw new Error("the preset select is hidden");
  $("preset").value = "smooth"; $("preset").dispatchEvent(new Event("change"));
  chooseFile("preset.mp4");
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
