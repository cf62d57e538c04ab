//! The page as the server serves it: its ES modules, every one reached from the entry and none over 400
//! lines, and the models, health and jobs its first render fills in from the server.

use crate::common;

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

/// The page's script is ES modules served from a list built into the binary: from the page's entry, every
/// import (followed over HTTP from the real server) resolves to a module served as JavaScript, each module is
/// at most 400 lines, every file in static/js/ is reached (none forgotten, none dead) and an unknown name is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_module_is_served_small_and_reached_from_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let html = client.get(server.url("/")).send().await.unwrap().text().await.unwrap();
    let entries: Vec<String> = html
        .split("<script type=\"module\" src=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_string())
        .collect();
    assert_eq!(entries, ["/js/main.js"], "the page loads one entry module");
    assert!(!html.contains("/static/app.js"), "the page still loads app.js");

    let base = reqwest::Url::parse(&server.url("/")).unwrap();
    let mut pending: Vec<reqwest::Url> = entries.iter().map(|e| base.join(e).unwrap()).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(url) = pending.pop() {
        if !seen.insert(url.path().to_string()) {
            continue;
        }
        let response = client.get(url.clone()).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url} is imported but not served");
        let kind = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/javascript"), "{url} is served as {kind}");
        let source = response.text().await.unwrap();
        let lines = source.lines().count();
        assert!(lines <= 400, "{url} has {lines} lines (at most 400)");
        for specifier in imported_specifiers(&source) {
            pending.push(url.join(&specifier).unwrap_or_else(|e| panic!("{url}: import {specifier:?}: {e}")));
        }
    }
    let files: std::collections::BTreeSet<String> = std::fs::read_dir(Path::new(REPO).join("static/js"))
        .unwrap()
        .map(|entry| format!("/js/{}", entry.unwrap().file_name().to_string_lossy()))
        .collect();
    assert_eq!(seen, files, "the modules reached from the page are not the files in static/js/");

    let response = client.get(server.url("/js/nowhere.js")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not-found", "{body}");
}

/// The specifiers a module imports from: its `import`/`export … from` statements (at the start of a line, up
/// to their `;`) and any `import("…")`.
pub(super) fn imported_specifiers(source: &str) -> Vec<String> {
    let quoted = |text: &str| -> Option<String> {
        let start = text.find(['"', '\''])?;
        let quote = text[start..].chars().next().unwrap();
        let rest = &text[start + 1..];
        Some(rest[..rest.find(quote)?].to_string())
    };
    let mut specifiers = Vec::new();
    for (at, _) in source.match_indices('\n').map(|(i, m)| (i + 1, m)).chain([(0, "")]) {
        let statement = &source[at..];
        let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
        if statement.starts_with("import ") || statement.starts_with("import{") {
            let after = statement.rfind(" from ").map_or(&statement["import".len()..], |from| &statement[from..]);
            specifiers.extend(quoted(after));
        } else if statement.starts_with("export {") || statement.starts_with("export *") {
            if let Some(from) = statement.rfind(" from ") {
                specifiers.extend(quoted(&statement[from..]));
            }
        }
    }
    for (at, _) in source.match_indices("import(") {
        specifiers.extend(quoted(&source[at + "import(".len()..]));
    }
    specifiers
}
