//! The submit form in the window: its submit button and error in view at its tallest, its selects wide
//! enough for every option (at 1280 and at 1024 px), its file kept after a submit, and what the box expects
//! the chosen file to take.

use crate::common;

use std::time::Duration;

use common::browser::{png_size, Browser};
use common::*;
use serde_json::{json, Value};

use super::{js, open_page, queue_only_server, shown_at_its_centre, Rect, HEIGHT, NARROW_HEIGHT, NARROW_WIDTH, WIDTH};

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

/// Sets a select as the user does: the change bubbles up to the form, which hears it as it hears the user's.
fn choose(browser: &mut Browser, id: &str, value: &str) {
    browser.eval(&format!(
        "(() => {{ const select = document.getElementById({}); select.value = {}; select.dispatchEvent(new Event('change', {{ bubbles: true }})); }})()",
        js(id),
        js(value)
    ));
}

/// The line under the form once it shows an answer (not while it asks).
fn estimate_line(browser: &mut Browser, starting: &str) -> String {
    let shown = format!("(() => {{ const line = document.getElementById('estimate'); return !line.hidden && line.textContent.startsWith({}) && line.textContent; }})()", js(starting));
    let line = browser.wait_until(&shown, Duration::from_secs(20));
    line.unwrap_or_else(|| panic!("the form shows no estimate starting {starting:?}: {:?}", browser.eval("document.getElementById('estimate').textContent"))).as_str().unwrap().to_string()
}

/// Once a file is chosen the form says what the box expects of it (POST /v1/estimate, nothing queued): with
/// a model no job of which has finished here, that there is no basis for a time; with the model and scale of
/// a finished job, the time the box itself estimates; and the result's frames and size either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_says_what_the_chosen_file_would_take() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let bytes = std::fs::read(&clip).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let done = run_job(&client, &server, "op=upscale&scale=2&filename=done.mp4", bytes.clone()).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let model = done["model"].as_str().unwrap();
    let url = server.url(&format!("/v1/estimate?op=upscale&scale=2&model={model}"));
    let (status, expected) = send_json(client.post(url).body(bytes.clone())).await;
    assert_eq!(status, 200, "{expected}");
    let seconds = expected["seconds"].as_f64().unwrap_or_else(|| panic!("no time after a finished job: {expected}"));

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    choose_op(&mut browser, "upscale");
    let other = browser.eval(&format!("[...document.getElementById('model').options].find((o) => !o.disabled && o.value !== {}).value", js(model)));
    choose(&mut browser, "model", other.as_str().unwrap());
    choose_file(&mut browser, "estimated.mp4", &bytes);
    let line = estimate_line(&mut browser, "no basis");
    assert!(line.starts_with("no basis for a time yet (no such job finished here) · 3 frames "), "{line:?} with {other}");

    choose(&mut browser, "model", model);
    choose(&mut browser, "scale", "2");
    let line = estimate_line(&mut browser, "about ");
    let starts = format!("about {}s on this box · 3 frames 352×288 · about ", seconds.round());
    assert!(line.starts_with(&starts), "{line:?} is not {starts:?}… (the box estimates {expected})");
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(1), "an estimate queued a job: {listed}");
}
