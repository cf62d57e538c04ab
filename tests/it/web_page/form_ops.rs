//! What the submit form sends for an op (restore with SeedVR2 or FlashVSR, interpolate; Try first, a preset),
//! with the network stubbed, and what the card then shows of the job the server ran from those fields: its plan
//! and timings.

use crate::common;
use crate::flashvsr_jobs;

use std::path::Path;
use std::time::Duration;

use common::browser::Browser;
use common::tensors::read_tensor_map;
use common::*;
use serde_json::{json, Value};

use super::job_cards::restore_plan_in_words;
use super::{open_page, HEIGHT, WIDTH};

/// Runs the page from the real server at `page` with the network replaced: `fetch` answers with `models`
/// (a real /v1/models listing), the upload's `send` records its form fields, and `driver` plays the user,
/// run once the page is parsed and before its script (its modules) starts, with `$`, `set` and `chooseFile`
/// at hand. Returns what the upload would have sent, as (name, value) with a file given by its name.
fn fields_the_form_sends(page: &str, models: &Value, driver: &str) -> Vec<(String, String)> {
    fields_and_what_the_driver_saw(page, models, driver).0
}

/// As `fields_the_form_sends`, with what the driver put in `document.body.dataset.seen` (JSON; null if nothing).
fn fields_and_what_the_driver_saw(page: &str, models: &Value, driver: &str) -> (Vec<(String, String)>, Value) {
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
    let seen = browser.eval("document.body.dataset.seen || 'null'");
    (serde_json::from_str(sent.as_str().unwrap()).unwrap(), serde_json::from_str(seen.as_str().unwrap()).unwrap())
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

/// A FlashVSR model in the form offers what applies to it: a decoder (its own TCDecoder by default, or a Wan 2.1
/// VAE of the box, not the SeedVR2 VAE), ×4 only, FlashVSR's seed, colour fix and fit; SeedVR2's fields are hidden
/// and, filled in before the model was changed, not sent. Left as they are, the fields send no SeedVR2 default
/// (the box's own, 0, adain and pad, apply); the user's choices go as given, run on the box, and the card shows
/// the run's plan in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_offers_flashvsr_with_its_own_choices_and_sends_no_seedvr2_fields() {
    let dir = tempfile::tempdir().unwrap();
    let case = read_tensor_map(&Path::new(flashvsr_jobs::REFERENCE).join("e2e_tiny.safetensors"));
    let models = models_with_small_seedvr2(dir.path());
    models_with_small_wan21(dir.path());
    flashvsr_jobs::model_folder(&models, "FlashVSR", &case["context"]);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let (status, listing) = get_json(&client, &server.url("/v1/models")).await;
    assert_eq!(status, 200, "{listing}");

    // SeedVR2's fields filled in (a size, a batch, scene cuts, a short side, a colour fix), then FlashVSR chosen.
    let driver = r#"
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "restore");
  set("model", "seedvr2-3b-small");
  set("scale", "size"); $("height").value = "96"; $("width").value = "112";
  $("batch-frames").value = "5"; $("scene-threshold").value = "0.3"; $("resolution").value = "100"; set("color-fix", "lab");
  set("model", "FlashVSR");
  const options = (id) => [...$(id).options].map((o) => [o.value, o.text]);
  const ids = ["vae", "scale", "height", "seed", "color-fix", "scene-threshold", "fit", "batch-frames", "batch-overlap",
    "resolution", "max-resolution", "input-noise-scale", "latent-noise-scale", "prepend-frames", "uniform-batches"];
  document.body.dataset.seen = JSON.stringify({
    op: $("op").selectedOptions[0].text, vae_label: $("vae-label").textContent, vae: options("vae"), scale: options("scale"),
    seed: $("seed").placeholder, color_fix: options("color-fix"), fit: options("fit"),
    shown: ids.filter((id) => !$(id).closest("[hidden]")),
  });
  chooseFile("flashvsr-defaults.mkv");
  $("submit").click();
})();"#;
    let (page, listed) = (server.url("/"), listing.clone());
    let (sent, seen) = tokio::task::spawn_blocking(move || fields_and_what_the_driver_saw(&page, &listed, driver)).await.unwrap();
    let expected = [("op", "restore"), ("model", "FlashVSR"), ("scale", "4"), ("priority", "0"), ("dtype", "auto"), ("file", "file:flashvsr-defaults.mkv")];
    assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())), "the form sent other fields");
    assert_eq!(seen["op"], "Restore (SeedVR2 or FlashVSR, video → video)", "{seen}");
    assert_eq!(seen["vae_label"], "Decoder", "{seen}");
    assert_eq!(seen["vae"], json!([["", "TCDecoder (Tiny, the model's own)"], ["wan21-small", "wan21-small (Full)"]]), "{seen}");
    assert_eq!(seen["scale"], json!([["4", "×4"]]), "{seen}");
    assert_eq!(seen["seed"], "0", "{seen}");
    assert_eq!(seen["color_fix"], json!([["", "AdaIN (default)"], ["none", "none"]]), "{seen}");
    assert_eq!(seen["fit"], json!([["", "pad (default)"], ["crop", "crop"]]), "{seen}");
    assert_eq!(seen["shown"], json!(["vae", "scale", "seed", "color-fix", "fit"]), "SeedVR2's fields show: {seen}");

    // The user's own choices: Full with the box's Wan 2.1 VAE, a seed, no colour fix, the centre crop.
    let driver_choices = r#"
(function drive() {
  if ($("op").disabled) return setTimeout(drive, 50);
  set("op", "restore");
  set("model", "FlashVSR");
  set("vae", "wan21-small"); $("seed").value = "5"; set("color-fix", "none"); set("fit", "crop");
  chooseFile("lr.mkv");
  $("submit").click();
})();"#;
    let (page, listed) = (server.url("/"), listing.clone());
    let sent = tokio::task::spawn_blocking(move || fields_the_form_sends(&page, &listed, driver_choices)).await.unwrap();
    let expected = [
        ("op", "restore"),
        ("model", "FlashVSR"),
        ("vae", "wan21-small"),
        ("scale", "4"),
        ("seed", "5"),
        ("color_fix", "none"),
        ("fit", "crop"),
        ("priority", "0"),
        ("dtype", "auto"),
        ("file", "file:lr.mkv"),
    ];
    assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())), "the form sent other fields");

    // What the form sends is what the box runs (the reference's 29 frames of 64×40); the card says how, in words.
    let clip = flashvsr_jobs::lossless_clip(&case["lr_u8_thwc"], &dir.path().join("lr.mkv"));
    let query: Vec<String> = sent.iter().filter(|(k, _)| k != "file").map(|(k, v)| format!("{k}={v}")).collect();
    let job = run_job(&client, &server, &format!("{}&filename=lr.mkv", query.join("&")), clip).await;
    let plan = job["plan"].clone();
    assert_eq!((&plan["decoder"], &plan["vae"], &plan["seed"], &plan["fit"]), (&json!("full"), &json!("wan21-small"), &json!(5), &json!("crop")), "{plan}");
    let (id, page, shown_plan) = (job["id"].as_str().unwrap().to_string(), server.url("/"), plan.clone());
    let (summary, rows) = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::start(WIDTH, HEIGHT);
        open_page(&mut browser, &page);
        restore_plan_in_words(&mut browser, &id, &shown_plan)
    })
    .await
    .unwrap();
    let steps = plan["steps"].as_u64().unwrap();
    assert_eq!(summary, format!("Restore plan — FlashVSR 1.0 · Full decoder · {steps} DiT steps · 256×128 out"), "{rows:?}");
    let row = |label: &str| rows.iter().find(|(head, _)| head == label).map(|(_, value)| value.as_str()).unwrap_or_else(|| panic!("no {label} row: {rows:?}"));
    assert_eq!(row("Decoder"), "Full (the Wan 2.1 VAE wan21-small)");
    assert_eq!(row("Fit"), "the centre, cropped to multiples of 128");
    assert_eq!(row("Model's size"), "256×128 px (multiples of 128)");
    assert_eq!(row("Colour fix"), "none");
}
