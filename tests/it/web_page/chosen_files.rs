//! What the chosen files allow: a still picture has no first seconds to try, so Try first is off and says
//! why (the box would refuse the try); several files, dropped or chosen at once, are queued as one job
//! each, with the same settings.

use crate::common;

use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::{json, Value};

use super::{js, open_page, queue_only_server, HEIGHT, WIDTH};

/// A file as the page gets it: its name, its MIME type and its bytes.
struct Chosen<'a> {
    name: &'a str,
    mime: &'a str,
    bytes: &'a [u8],
}

/// JavaScript that makes `files`, a DataTransfer holding the files.
fn data_transfer(files: &[Chosen]) -> String {
    let mut script = String::from("const files = new DataTransfer();\n");
    for file in files {
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, file.bytes);
        script.push_str(&format!(
            "files.items.add(new File([Uint8Array.from(atob({}), (c) => c.charCodeAt(0))], {}, {{ type: {} }}));\n",
            js(encoded),
            js(file.name),
            js(file.mime)
        ));
    }
    script
}

/// Chooses `files` in the form's file input, as the file picker does.
fn choose_files(browser: &mut Browser, files: &[Chosen]) {
    let script = format!("(() => {{ {} const input = document.getElementById('file'); input.files = files.files; input.dispatchEvent(new Event('change')); }})()", data_transfer(files));
    browser.eval(&script);
}

/// Drops `files` on the drop zone, as dragging them from a file manager does (enter, over, drop).
fn drop_files(browser: &mut Browser, files: &[Chosen]) {
    let script = format!(
        "(() => {{ {} const zone = document.getElementById('dropzone');
           for (const type of ['dragenter', 'dragover', 'drop']) zone.dispatchEvent(new DragEvent(type, {{ dataTransfer: files, bubbles: true, cancelable: true }})); }})()",
        data_transfer(files)
    );
    browser.eval(&script);
}

/// Sets a select as the user does (the change bubbles to the form).
fn choose(browser: &mut Browser, id: &str, value: &str) {
    browser.eval(&format!(
        "(() => {{ const select = document.getElementById({}); select.value = {}; select.dispatchEvent(new Event('change', {{ bubbles: true }})); }})()",
        js(id),
        js(value)
    ));
}

/// Try first as the user finds it: whether it can be pressed, the reason its title gives, and the line
/// under the buttons (null while hidden).
fn try_first(browser: &mut Browser) -> Value {
    browser.eval(
        "(() => { const $ = (id) => document.getElementById(id); const note = $('try-first-note');
           return { disabled: $('try-first').disabled, title: $('try-first').title, wrapper_title: $('try-first').parentElement.title,
                    note: !note || note.hidden ? null : note.textContent, submit_disabled: $('submit').disabled }; })()",
    )
}

/// A still picture (PNG) chosen: Try first is off, its title and a line under the buttons say that a still
/// has no first part to try, and Upload & queue still sends it whole. The box does refuse such a try (400),
/// which is what the page spared the user. A video chosen after it turns Try first back on, with no reason
/// shown; a still among several files turns it off again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_first_is_off_for_a_still_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let (clip, still) = (std::fs::read(&clip).unwrap(), std::fs::read(media("coffee.png")).unwrap());
    let server = queue_only_server(dir.path());
    let (status, refused) = upload_raw(&client(), &server, "op=upscale&scale=2&duration=5&filename=coffee.png", still.clone()).await;
    assert_eq!(status, 400, "the box took a still's try: {refused}");

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    choose(&mut browser, "op", "upscale");
    choose_files(&mut browser, &[Chosen { name: "coffee.png", mime: "image/png", bytes: &still }]);
    let shown = try_first(&mut browser);
    assert_eq!((&shown["disabled"], &shown["submit_disabled"]), (&json!(true), &json!(false)), "a still: {shown}");
    let reason = shown["title"].as_str().unwrap();
    assert!(reason.contains("coffee.png is a still picture") && reason.contains("no first part of it to try"), "{shown}");
    assert_eq!((&shown["wrapper_title"], &shown["note"]), (&json!(reason), &json!(reason)), "the reason is not shown around the button and under it: {shown}");

    choose_files(&mut browser, &[Chosen { name: "clip.mp4", mime: "video/mp4", bytes: &clip }]);
    let shown = try_first(&mut browser);
    assert_eq!(shown, json!({ "disabled": false, "title": "", "wrapper_title": "", "note": null, "submit_disabled": false }), "a video");

    let both = [Chosen { name: "clip.mp4", mime: "video/mp4", bytes: &clip }, Chosen { name: "coffee.png", mime: "image/png", bytes: &still }];
    choose_files(&mut browser, &both);
    let shown = try_first(&mut browser);
    assert!(shown["disabled"] == json!(true) && shown["note"].as_str().is_some_and(|note| note.starts_with("coffee.png is a still picture")), "a video and a still: {shown}");
}

/// The jobs' (file name, op, scale, priority, range) as the box lists them, sorted by file name.
async fn listed_jobs(server: &Server) -> Vec<Value> {
    let (_, listed) = get_json(&client(), &server.url("/v1/jobs")).await;
    let mut jobs: Vec<Value> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| json!([j["input"]["file_name"], j["op"], j["params"]["scale"], j["priority"], j["params"]["range"], j["input"]["bytes"]]))
        .collect();
    jobs.sort_by_key(|j| j[0].as_str().unwrap_or_default().to_string());
    jobs
}

/// Two files dropped at once: the drop zone names both, and Upload & queue sends each as a job of its own
/// with the form's settings (upscale ×2, priority 3), every byte of each. Two more chosen together in the
/// file picker, then Try first: a try of each, over the same seconds. The page shows a card for each job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_files_dropped_or_chosen_queue_a_job_each_with_the_same_settings() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let clip = std::fs::read(&clip).unwrap();
    // No worker: the jobs wait in the queue as they were sent.
    let server = queue_only_server(dir.path());

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    assert_eq!(browser.eval("document.getElementById('file').multiple"), json!(true), "the file picker takes one file only");
    choose(&mut browser, "op", "upscale");
    choose(&mut browser, "scale", "2");
    browser.eval("document.getElementById('priority').value = '3'");
    drop_files(&mut browser, &[Chosen { name: "one.mp4", mime: "video/mp4", bytes: &clip }, Chosen { name: "two.mp4", mime: "video/mp4", bytes: &clip }]);
    let named = browser.eval("document.getElementById('file-info').hidden ? null : document.getElementById('file-info').textContent");
    let named = named.as_str().unwrap_or_else(|| panic!("the drop zone names no files after the drop"));
    assert!(named.starts_with("2 files") && named.contains("one.mp4, two.mp4") && named.contains("one job each"), "{named:?}");

    browser.eval("document.getElementById('submit').click()");
    let cards = |names: &[&str]| names.iter().map(|name| format!("[...document.querySelectorAll('.job-title')].some((t) => t.textContent === {})", js(name))).collect::<Vec<_>>().join(" && ");
    let queued = browser.wait_until(&cards(&["one.mp4", "two.mp4"]), Duration::from_secs(30));
    assert!(queued.is_some(), "no card for each dropped file: {}", browser.eval("document.getElementById('form-error').textContent"));

    choose_files(&mut browser, &[Chosen { name: "three.mp4", mime: "video/mp4", bytes: &clip }, Chosen { name: "four.mp4", mime: "video/mp4", bytes: &clip }]);
    browser.eval("document.getElementById('try-seconds').value = '1'; document.getElementById('try-first').click()");
    let tried = browser.wait_until(&cards(&["three.mp4", "four.mp4"]), Duration::from_secs(30));
    assert!(tried.is_some(), "no try of each chosen file: {}", browser.eval("document.getElementById('form-error').textContent"));

    let whole = json!(null);
    let first_second = json!({ "duration": 1.0 });
    let expected: Vec<Value> = [("four.mp4", &first_second), ("one.mp4", &whole), ("three.mp4", &first_second), ("two.mp4", &whole)]
        .iter()
        .map(|(name, range)| json!([name, "upscale", 2, 3, range, clip.len()]))
        .collect();
    assert_eq!(listed_jobs(&server).await, expected, "[file, op, scale, priority, range, bytes] of the jobs the box got");
}
