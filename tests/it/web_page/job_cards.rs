//! The job list's cards: a try's title and four buttons at 1024 px, a try's link to its whole clip once
//! there is one, a restore's plan in words, and the list's op filter.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::json;

use super::{js, open_page, Rect, HEIGHT, NARROW_HEIGHT, NARROW_WIDTH, WIDTH};

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

/// The labels and links (`href`) of a card's buttons.
fn card_actions(browser: &mut Browser, card: &str) -> serde_json::Value {
    browser.eval(&format!("[...document.querySelectorAll({})].map((b) => [b.textContent, b.getAttribute('href')])", js(format!("{card} .job-actions > *"))))
}

/// A succeeded try offers Run the whole clip; once pressed, the card links to the whole clip's job (the one
/// the box made with `from_try` naming the try) instead of offering it again, and after a reload, the link
/// found from the list alone, it still does. A try whose whole clip was asked for elsewhere (by the API)
/// links to it as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_links_to_its_whole_clip_instead_of_running_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 8, false, &clip);
    let clip = std::fs::read(&clip).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let by_page = run_job(&client, &server, "op=upscale&scale=2&duration=0.2&filename=by-page.mp4", clip.clone()).await;
    let by_api = run_job(&client, &server, "op=upscale&scale=2&duration=0.2&filename=by-api.mp4", clip).await;
    let (by_page, by_api) = (by_page["id"].as_str().unwrap(), by_api["id"].as_str().unwrap());
    let response = client.post(server.url(&format!("/v1/jobs/{by_api}/whole"))).send().await.unwrap();
    assert_eq!(response.status(), 202);
    let api_whole: serde_json::Value = response.json().await.unwrap();

    let mut browser = Browser::start(WIDTH, HEIGHT);
    open_page(&mut browser, &server.url("/"));
    let card = format!("#job-{by_page}");
    let offered = format!("[...document.querySelectorAll({})].some((b) => b.textContent === 'Run the whole clip')", js(format!("{card} .job-actions > button")));
    assert!(browser.wait_until(&offered, Duration::from_secs(15)).is_some(), "the try offers no Run the whole clip: {}", card_actions(&mut browser, &card));
    browser.eval(&format!("[...document.querySelectorAll({})].find((b) => b.textContent === 'Run the whole clip').click()", js(format!("{card} .job-actions > button"))));
    let linked = format!("document.querySelector({}) && document.querySelector({}).getAttribute('href')", js(format!("{card} a.whole-clip")), js(format!("{card} a.whole-clip")));
    let href = browser.wait_until(&linked, Duration::from_secs(15)).unwrap_or_else(|| panic!("no link to the whole clip after Run the whole clip: {}", card_actions(&mut browser, &card)));

    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    let wholes: Vec<&serde_json::Value> = listed["jobs"].as_array().unwrap().iter().filter(|j| j["from_try"] == json!(by_page)).collect();
    assert_eq!(wholes.len(), 1, "the box did not make one whole clip of the try: {listed}");
    assert_eq!(href, json!(format!("#job-{}", wholes[0]["id"].as_str().unwrap())), "the link is not to the whole clip's job");
    let expect_link = |browser: &mut Browser, card: &str, href: &str, when: &str| {
        let actions = card_actions(browser, card);
        let labels: Vec<&str> = actions.as_array().unwrap().iter().map(|a| a[0].as_str().unwrap()).collect();
        assert!(!labels.contains(&"Run the whole clip"), "{when}: the card still offers the whole clip: {actions}");
        let link = actions.as_array().unwrap().iter().find(|a| a[1] == json!(href));
        assert!(link.is_some_and(|a| a[0].as_str().unwrap().starts_with("Whole clip (")), "{when}: no link to {href}: {actions}");
    };
    expect_link(&mut browser, &card, href.as_str().unwrap(), "after the click");

    browser.reload();
    let api_card = format!("#job-{by_api}");
    let both = format!("document.querySelector({}) && document.querySelector({})", js(format!("{card} a.whole-clip")), js(format!("{api_card} a.whole-clip")));
    assert!(browser.wait_until(&both, Duration::from_secs(15)).is_some(), "after a reload: {} / {}", card_actions(&mut browser, &card), card_actions(&mut browser, &api_card));
    expect_link(&mut browser, &card, href.as_str().unwrap(), "after a reload");
    expect_link(&mut browser, &api_card, &format!("#job-{}", api_whole["id"].as_str().unwrap()), "asked for by the API");
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
    let (_, rows) = restore_plan_in_words(&mut browser, id, &job["plan"]);
    for label in ["Fit", "Padding", "Mirrored lead frames", "Input noise", "Latent noise"] {
        assert!(rows.iter().any(|(head, _)| head == label), "no {label} row: {rows:?}");
    }
}

/// The summary and the (heading, value) rows of the Restore plan on job `id`'s card, once the page shows it,
/// checked to be in words: no row headed by one of the `plan`'s own keys (or by any name with `_`, or not
/// capitalised), and no value shown as JSON.
pub(super) fn restore_plan_in_words(browser: &mut Browser, id: &str, plan: &serde_json::Value) -> (String, Vec<(String, String)>) {
    let keys: Vec<&String> = plan.as_object().expect("a restore plan").keys().collect();
    let shown = format!(
        "(() => {{ const plan = [...document.querySelectorAll({})].find((d) => d.querySelector('summary').textContent.startsWith('Restore plan'));
           return plan && [plan.querySelector('summary').textContent,
             [...plan.querySelectorAll('table.kv > tbody > tr')].map((tr) => [tr.querySelector('th').textContent, tr.querySelector('td').textContent])]; }})()",
        js(format!("#job-{id} details.block"))
    );
    let shown = browser.wait_until(&shown, Duration::from_secs(15)).unwrap_or_else(|| panic!("the card shows no restore plan"));
    let (summary, rows): (String, Vec<(String, String)>) = serde_json::from_value(shown).unwrap();
    let raw: Vec<&(String, String)> = rows.iter().filter(|(head, _)| keys.iter().any(|k| *k == head) || head.contains('_') || !head.starts_with(|c: char| c.is_uppercase())).collect();
    assert!(raw.is_empty(), "rows headed by the plan's keys: {raw:?}\nall rows: {rows:?}");
    let json_values: Vec<&(String, String)> = rows.iter().filter(|(_, value)| value.starts_with(['[', '{'])).collect();
    assert!(json_values.is_empty(), "values shown as JSON: {json_values:?}");
    (summary, rows)
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
