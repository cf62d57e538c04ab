//! The page in a phone's window (390×844, the form above the job list): the form shows its main choices
//! with the rest behind "All settings", so the job list starts within the first screen even for restore, the
//! tallest form; and a card has no blank rows (its head once took its 18rem flex basis as its height).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::{json, Value};

use super::{js, open_page};

const PHONE_WIDTH: u32 = 390;
const PHONE_HEIGHT: u32 = 844;

/// The most blank height a card may hold between two of its parts, or below its last: the margins and gaps
/// between sections are at most 0.6rem (10 px); a blank row is a line's height (16 px and more).
const MOST_BLANK_PX: f64 = 12.0;

/// Where an element starts from the top of the page (not of the window), in CSS pixels.
fn page_top(browser: &mut Browser, selector: &str) -> f64 {
    let script = format!("(() => {{ const el = document.querySelector({}); return el ? el.getBoundingClientRect().top + window.scrollY : null; }})()", js(selector));
    browser.eval(&script).as_f64().unwrap_or_else(|| panic!("no {selector} on the page"))
}

/// Whether the element takes up room on the page (a hidden one, or one in a hidden parent, has no box).
fn shown(browser: &mut Browser, selector: &str) -> bool {
    browser.eval(&format!("document.querySelector({}).getClientRects().length > 0", js(selector))) == json!(true)
}

/// The blank runs taller than `MOST_BLANK_PX` in the cards: for every element of a card with children that
/// take room, the heights of its content box that none of them covers, as [the element's class, the run].
fn blank_runs_in_cards(browser: &mut Browser) -> Value {
    browser.eval(&format!(
        r#"(() => {{
  const runs = [];
  for (const el of document.querySelectorAll(".job, .job *")) {{
    const parts = [...el.children].map((c) => c.getBoundingClientRect()).filter((r) => r.height > 0).sort((a, b) => a.top - b.top);
    if (!parts.length) continue;
    const style = getComputedStyle(el), box = el.getBoundingClientRect();
    let covered = box.top + parseFloat(style.borderTopWidth) + parseFloat(style.paddingTop);
    const end = box.bottom - parseFloat(style.borderBottomWidth) - parseFloat(style.paddingBottom);
    for (const part of parts) {{
      if (part.top - covered > {most}) runs.push([el.className || el.tagName, Math.round(part.top - covered)]);
      covered = Math.max(covered, part.bottom);
    }}
    if (end - covered > {most}) runs.push([el.className || el.tagName, Math.round(end - covered)]);
  }}
  return runs;
}})()"#,
        most = MOST_BLANK_PX
    ))
}

/// A phone's window on a box that restores and upscales, with a succeeded try listed (thumbnail, badge,
/// title, four buttons, facts, timings): with restore chosen and a clip picked, the job list's heading and
/// its first card start within the first screen, the page is no wider than the window, and "All settings"
/// shows the rest of the form (and hides it again). No card holds a blank row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_phone_the_job_list_starts_within_the_first_screen_and_cards_have_no_blank_rows() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    std::os::unix::fs::symlink(Path::new(REPO).join("models/realesrgan"), models.join("realesrgan")).unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 8, false, &clip);
    let clip = std::fs::read(&clip).unwrap();
    let job = run_job(&client(), &server, "op=upscale&scale=2&duration=0.2&filename=phone-try.mp4", clip.clone()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let card = format!("#job-{}", job["id"].as_str().unwrap());

    let mut browser = Browser::start(PHONE_WIDTH, PHONE_HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &clip);
    browser.eval(&format!(
        r#"(() => {{
  const $ = (id) => document.getElementById(id);
  $("op").value = "restore"; $("op").dispatchEvent(new Event("change", {{ bubbles: true }}));
  const files = new DataTransfer();
  files.items.add(new File([Uint8Array.from(atob({}), (c) => c.charCodeAt(0))], "phone.mp4", {{ type: "video/mp4" }}));
  $("file").files = files.files; $("file").dispatchEvent(new Event("change"));
}})()"#,
        js(encoded)
    ));
    // The thumbnail's box is set by the style sheet, loaded or not.
    let thumbnail_and_buttons = format!("document.querySelector({}) && document.querySelectorAll({}).length === 4", js(format!("{card} img.thumb")), js(format!("{card} .job-actions > *")));
    assert!(browser.wait_until(&thumbnail_and_buttons, Duration::from_secs(15)).is_some(), "the try's card is not drawn in full");
    // The line under the form (the estimate) has had time to show.
    std::thread::sleep(Duration::from_secs(1));

    let (heading, first_card) = (page_top(&mut browser, "#jobs-heading"), page_top(&mut browser, "#jobs > .job"));
    let screen = PHONE_HEIGHT as f64;
    assert!(heading < screen && first_card < screen, "the job list starts {heading} px down, its first card {first_card} px, in a {screen} px window");
    let page_width = browser.eval("document.documentElement.scrollWidth").as_f64().unwrap();
    assert!(page_width <= PHONE_WIDTH as f64, "the page is {page_width} px wide in a {PHONE_WIDTH} px window");
    for selector in ["#op", "#model", "#vae", "#scale", "#submit", "#try-first", "#all-settings"] {
        assert!(shown(&mut browser, selector), "{selector} is not shown in the compact form");
    }
    for selector in ["#dtype", "#output-format", "#priority", "#callback-url", "#seed", "#restore-advanced"] {
        assert!(!shown(&mut browser, selector), "{selector} shows before All settings");
    }

    browser.eval("document.getElementById('all-settings').click()");
    for selector in ["#dtype", "#output-format", "#priority", "#callback-url", "#seed", "#restore-advanced"] {
        assert!(shown(&mut browser, selector), "{selector} is not shown after All settings");
    }
    assert_eq!(browser.eval("document.getElementById('all-settings').getAttribute('aria-expanded')"), json!("true"));
    browser.eval("document.getElementById('all-settings').click()");
    assert!(!shown(&mut browser, "#dtype"), "Fewer settings did not hide the rest again");
    assert_eq!(page_top(&mut browser, "#jobs-heading"), heading, "the form is not as compact as before All settings");

    let runs = blank_runs_in_cards(&mut browser);
    assert_eq!(runs, json!([]), "blank runs (px) in the cards at {PHONE_WIDTH} px");
}
