//! The web page, run by a real headless browser against the real server: its script fills the model
//! list from /v1/models, the header from /healthz and the job list from /v1/jobs. The tests that look at
//! where things are, or at what the page does as a job moves on, drive Chromium over DevTools
//! (`common::browser`) in a window of 1280×900.
//!
//! One file per view of the page (the page's own split is static/js/*.js):
//! - `served`: the page as the server serves it: its ES modules (main.js and all it imports), and the
//!   models, health and jobs its first render fills in;
//! - `form_ops`: what the submit form sends for an op (restore with SeedVR2 or FlashVSR, interpolate; Try first, a
//!   preset), and the plan and timings the card then shows for the job it ran (form-*.js, presets.js, plan-table.js);
//! - `form`: the submit form in the window: in view at its tallest, its selects wide enough for their
//!   options, its file kept after a submit, the estimate for the chosen file (form-*.js, file-choice.js,
//!   upload.js);
//! - `chosen_files`: what the chosen files allow: no Try first for a still, and several files dropped or
//!   chosen at once queued as a job each (file-choice.js, form-choices.js, upload.js);
//! - `job_cards`: the job list's cards: buttons and title at 1024 px, a try's link to its whole clip, a
//!   restore's plan in words, the op filter (job-card.js, card-*.js, plan-table.js, op-filter.js);
//! - `phone`: the page in a phone's window (390×844): a compact form with the job list within the first
//!   screen, and cards without blank rows (style.css, form-choices.js);
//! - `progress`: jobs followed as they wait and run: queue places and waits (on a shared box too, counting
//!   jobs the user cannot see), Pause and Resume, the header's running job, the thumbnail turning from input
//!   to output (queue-places.js, job-actions.js, job-progress.js, health.js, thumbnails.js);
//! - `compare`: the before/after view (compare.js);
//! - `module_cycles`: no page modules import each other in a loop (read from static/js/, no browser).
//!
//! The helpers several of them use (the window's size, opening the page, an element's box) are here.

mod chosen_files;
mod compare;
mod form;
mod form_ops;
mod job_cards;
mod module_cycles;
mod phone;
mod progress;
mod served;

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::json;

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;

/// The narrowest window the two-column layout is made for: the form's column keeps its width, the jobs get the rest.
const NARROW_WIDTH: u32 = 1024;
const NARROW_HEIGHT: u32 = 800;

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

/// A box that takes jobs and runs none until a worker (`start_worker`) joins it: jobs wait as long as a
/// test needs them to.
fn queue_only_server(dir: &Path) -> Server {
    Server::start(dir, &[("VAEBOX_ROLE", "api")])
}
