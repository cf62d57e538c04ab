//! Jobs followed as they wait and run, without a reload: queued cards' places and waits (on a shared box
//! too, where most of the line is other owners' jobs), pausing and resuming, the header's running job, and a
//! card's thumbnail turning from the input's still to the output's.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::browser::Browser;
use common::*;
use serde_json::{json, Value};

use super::{js, open_page, queue_only_server, HEIGHT, WIDTH};

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
    // The page shows a start once its last /healthz named a worker (the killed one stays listed until its
    // heartbeat is old): its place may be drawn before that refresh, so the card is given time to show it.
    let starts = |id: &str, expected: &str| format!("((document.querySelector({}) || {{}}).textContent || '').startsWith({})", js(format!("#job-{id} .queue-place")), js(expected));
    browser.wait_until(&starts(&next, "queued — position 1 · starts next"), Duration::from_secs(15));
    browser.wait_until(&starts(&after, "queued — position 2 · starts in about "), Duration::from_secs(15));
    let place = place_on_card(&mut browser, &next);
    assert_eq!(place, "queued — position 1 · starts next");
    let place = place_on_card(&mut browser, &after);
    let waits: f64 = place.strip_prefix("queued — position 2 · starts in about ").and_then(|s| s.strip_suffix('s')).unwrap_or_else(|| panic!("no wait on the second queued card: {place}")).parse().unwrap();
    // The page rounds to whole seconds, and says at least 1 s behind another job. The box's estimate is a
    // line through its recent jobs (start-up and rate), not their median: a second apart at most here (it
    // once said 2 s for a median of 1.46 s on a busy machine).
    assert!((waits - median.max(1.0)).abs() <= 1.0 + 1e-9, "waits {waits} s, the median run is {median} s ({runs:?})");
}

/// The header says which job runs and stops saying so when it ended, and the card's thumbnail turns from
/// the input's still (176 px wide) to the output's (capped at 320 px), without a reload. The header's own
/// timer is stopped (as a background tab slows it to once a minute), so only following the job can do it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_thumbnail_follow_a_job_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough (several seconds) for the page, which polls the list every 3 s, to see it running: 60 frames
    // at ×2 once ran in under 3 s, between two polls and before the API process's stream saw the worker start
    // it; 120 at ×4 take several times as long.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 120, false, &clip);
    let server = queue_only_server(dir.path());
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=upscale&scale=4&filename=followed.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, job["status"].as_str()), (202, Some("queued")), "{job}");
    let id = job["id"].as_str().unwrap().to_string();

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

const ANN: &str = "ann-secret-12345";
const BOB: &str = "bob-secret-12345";

/// An upscale queued with an access token: its id.
async fn queue_as(client: &reqwest::Client, server: &Server, token: &str, clip: &Path, name: &str, priority: i64) -> String {
    let url = server.url(&format!("/v1/jobs?op=upscale&scale=2&priority={priority}&filename={name}"));
    let (status, job) = send_json(client.post(url).bearer_auth(token).body(std::fs::read(clip).unwrap())).await;
    assert_eq!((status, job["status"].as_str()), (202, Some("queued")), "{job}");
    job["id"].as_str().unwrap().to_string()
}

async fn status_as(client: &reqwest::Client, server: &Server, token: &str, id: &str) -> String {
    let (status, job) = send_json(client.get(server.url(&format!("/v1/jobs/{id}"))).bearer_auth(token)).await;
    assert_eq!(status, 200, "{job}");
    job["status"].as_str().unwrap().to_string()
}

/// Clicks the button of that label on a job's card, once the card shows it.
fn click_on_card(browser: &mut Browser, id: &str, label: &str) {
    let button = format!("[...document.querySelectorAll({})].find((b) => b.textContent === {})", js(format!("#job-{id} .job-actions button")), js(label));
    assert!(browser.wait_until(&format!("!!{button}"), Duration::from_secs(15)).is_some(), "the card of {id} shows no {label} button");
    browser.eval(&format!("{button}.click()"));
}

/// On a shared box a queued card counts the jobs ahead that its owner cannot see: Bob's long job runs and
/// his two more urgent ones wait, so Ann's one job is third in line though her list shows only it. Pause
/// holds it back (the card turns paused, its place gone) and Resume puts it back where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_card_counts_the_jobs_its_owner_cannot_see() {
    let dir = tempfile::tempdir().unwrap();
    let (long, tiny) = (dir.path().join("long.mp4"), dir.path().join("tiny.mp4"));
    // On the CPU Bob's job runs for minutes, far past the test's end; the others never start.
    make_clip(&media("bikes.mp4"), 100, false, &long);
    make_clip(&media("carphone_pristine.mp4"), 3, false, &tiny);
    let tokens = format!("ann:{ANN},bob:{BOB}");
    // Nothing is lent the running job's executor (no job is short enough) and it never makes way: the line
    // stays as it was queued.
    let env = [("VAEBOX_TOKENS", tokens.as_str()), ("VAEBOX_SHORT_JOB_S", "0"), ("VAEBOX_FAIR_WAIT_S", "0"), ("VAEBOX_DEVICE", "cpu")];
    let server = Server::start(dir.path(), &env);
    let client = client();
    let bobs_long = queue_as(&client, &server, BOB, &long, "bob-long.mp4", 0).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status_as(&client, &server, BOB, &bobs_long).await != "running" {
        assert!(std::time::Instant::now() < deadline, "Bob's long job did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in ["bob-urgent-1.mp4", "bob-urgent-2.mp4"] {
        queue_as(&client, &server, BOB, &tiny, name, 1).await;
    }
    let anns = queue_as(&client, &server, ANN, &tiny, "ann.mp4", 0).await;

    let mut browser = Browser::start(WIDTH, HEIGHT);
    browser.before_each_document(&format!("localStorage.setItem('vaebox-token', {})", js(ANN)));
    open_page(&mut browser, &server.url("/"));
    assert_eq!(place_on_card(&mut browser, &anns), "queued — position 3", "Bob's two urgent jobs are ahead of Ann's");
    let cards = browser.eval("[...document.querySelectorAll('#jobs > li.job')].map((card) => card.id)");
    assert_eq!(cards, json!([format!("job-{anns}")]), "Ann's list shows a job that is not hers");
    // The header says the executor is busy with a job she cannot see, without naming it.
    let header = browser.wait_until("(document.getElementById('health-text').textContent.match(/running .*/) || [])[0]", Duration::from_secs(10));
    assert_eq!(header.as_ref().and_then(|h| h.as_str()).map(|h| h.starts_with("running a job not listed here")), Some(true), "{header:?}");

    click_on_card(&mut browser, &anns, "Pause");
    let card = format!("document.getElementById({})", js(format!("job-{anns}")));
    let paused = format!("{card}.classList.contains('st-paused') && !{card}.querySelector('.queue-place') && {card}.querySelector('.badge').textContent");
    assert_eq!(browser.wait_until(&paused, Duration::from_secs(10)), Some(json!("paused")), "the card did not turn paused");
    assert_eq!(status_as(&client, &server, ANN, &anns).await, "paused");

    click_on_card(&mut browser, &anns, "Resume");
    let queued = format!("{card}.classList.contains('st-queued') && ({card}.querySelector('.queue-place') || {{}}).textContent");
    assert_eq!(browser.wait_until(&queued, Duration::from_secs(10)), Some(json!("queued — position 3")), "the resumed job is not back in its place");
    assert_eq!(status_as(&client, &server, BOB, &bobs_long).await, "running", "Bob's long job ended within the test: the line it counts moved");
}
