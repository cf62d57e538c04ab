//! The web page, run by a real headless browser against the real server: its script fills the model
//! list from /v1/models, the header from /healthz and the job list from /v1/jobs.
mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

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


/// Runs the page's own script from a file in `dir` with the network replaced: `fetch` answers with `models`
/// (a real /v1/models listing), the upload's `send` records its form fields, and `driver` plays the user.
/// Returns what the upload would have sent, as (name, value) with a file given by its name.
fn fields_the_form_sends(dir: &Path, models: &Value, driver: &str) -> Vec<(String, String)> {
    let stubs = format!(
        r#"<script>
const MODELS = {models};
window.fetch = async (url) => new Response(JSON.stringify(String(url).startsWith("/v1/models") ? MODELS
  : String(url).startsWith("/v1/jobs") ? {{ jobs: [], next_offset: null }} : {{ status: "ok", device: "cpu" }}),
  {{ status: 200, headers: {{ "Content-Type": "application/json" }} }});
XMLHttpRequest.prototype.open = function () {{}};
XMLHttpRequest.prototype.setRequestHeader = function () {{}};
XMLHttpRequest.prototype.send = function (form) {{
  const sent = [...form.entries()].map(([k, v]) => [k, typeof v === "string" ? v : `file:${{v.name}}`]);
  document.body.dataset.sent = JSON.stringify(sent);
}};
</script>"#
    );
    let app_js = Path::new(REPO).join("static/app.js");
    let script = format!("{stubs}<script src=\"file://{}\" defer></script>", app_js.display());
    let page = include_str!("../static/index.html")
        .replace(r#"<script src="/static/app.js" defer></script>"#, &script)
        .replace("</body>", &format!("<script>{driver}</script></body>"));
    let harness = dir.join("harness.html");
    std::fs::write(&harness, page).unwrap();
    let dom = rendered_dom(&format!("file://{}", harness.display()), &dir.join("harness-profile"));
    let sent = dom.split("data-sent=\"").nth(1).unwrap_or_else(|| panic!("the form sent nothing:\n{dom}"));
    let sent = sent[..sent.find('"').unwrap()].replace("&quot;", "\"").replace("&amp;", "&");
    serde_json::from_str(&sent).unwrap()
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
    let harness = dir.path().to_path_buf();
    let sent = tokio::task::spawn_blocking(move || fields_the_form_sends(&harness, &listing, driver)).await.unwrap();
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
}
