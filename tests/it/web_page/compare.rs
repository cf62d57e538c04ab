//! The before/after (Compare) view: the address, seeking, frame steps and 1:1 of a video; a still
//! without playback controls.

use crate::common;

use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::{json, Value};

use super::{js, open_page, shown_at_its_centre, HEIGHT, WIDTH};

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
    crop_of_astronaut(&png, 180, 60);
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

    // Closed and opened on the video in one go: the dialog's `close` event, which comes a task after the
    // close, must not shut the view just opened (a slow page once showed an empty view this way).
    browser.eval(&format!("document.getElementById('compare-close').click(); {}.click()", compare(video)));
    wait_for_both_videos(&mut browser);
    assert_eq!(playback_shown(&mut browser), json!([true, true, true, true]), "a video's view after a still's lacks some of {PLAYBACK_CONTROLS:?}");
}
