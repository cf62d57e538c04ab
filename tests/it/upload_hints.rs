//! Uploads curl sends by a slip of the flags, sent by curl itself: `-F file=clip.mp4` (the name as text, no
//! `@`) and `-d @clip.mp4` (form-encoded, its line breaks dropped) are refused with their stable code and a
//! message that says what was probably meant; the flags it suggests do upload the clip.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

const QUERY: &str = "op=upscale&model=realesrgan-animevideov3&scale=2";

/// curl's answer (status, JSON) to `args`, run in `dir`.
fn curl(dir: &Path, url: &str, args: &[&str]) -> (u16, Value) {
    let out = Command::new("curl")
        .current_dir(dir)
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl is installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.trim().parse().unwrap(), serde_json::from_str(body).unwrap_or_else(|_| panic!("{text}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_slips_are_named_with_the_flags_that_were_meant() {
    let dir = tempfile::tempdir().unwrap();
    make_clip(&media("carphone_pristine.mp4"), 2, false, &dir.path().join("clip.mp4"));
    let server = Server::start(dir.path(), &[]);
    let jobs = server.url("/v1/jobs");
    let with_query = format!("{jobs}?{QUERY}");
    let form = ["-F", "op=upscale", "-F", "model=realesrgan-animevideov3", "-F", "scale=2"];
    let message = |body: &Value| body["error"]["message"].as_str().unwrap_or("").to_string();

    // `-F file=clip.mp4`: a `file` part of 8 bytes, the name.
    let (status, body) = curl(dir.path(), &jobs, &[&form[..], &["-F", "file=clip.mp4"]].concat());
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{body}");
    assert!(message(&body).contains("the upload is 8 bytes of text `clip.mp4`"), "{body}");
    assert!(message(&body).contains("did you mean `-F file=@clip.mp4`?"), "{body}");

    // `-d @clip.mp4`: form-encoded, the clip's line breaks dropped (an MP4 that lost its index, or no video).
    let (status, body) = curl(dir.path(), &with_query, &["-d", "@clip.mp4"]);
    assert_eq!(status, 422, "{body}");
    assert!(["not-a-video", "truncated-media"].contains(&body["error"]["code"].as_str().unwrap()), "{body}");
    assert!(message(&body).contains("form-encoded") && message(&body).contains("`curl -d`"), "{body}");
    assert!(message(&body).contains("`--data-binary @clip.mp4` or `-F file=@clip.mp4`"), "{body}");

    // `-d clip.mp4`: the name, form-encoded.
    let (status, body) = curl(dir.path(), &with_query, &["-d", "clip.mp4"]);
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{body}");
    assert!(message(&body).contains("8 bytes of text `clip.mp4`") && message(&body).contains("`--data-binary @clip.mp4`"), "{body}");

    // What the messages suggest is accepted.
    let (status, body) = curl(dir.path(), &jobs, &[&form[..], &["-F", "file=@clip.mp4"]].concat());
    assert_eq!(status, 202, "{body}");
    let (status, body) = curl(dir.path(), &with_query, &["--data-binary", "@clip.mp4"]);
    assert_eq!(status, 202, "{body}");
    let done = wait_for_final(&client(), &server, body["id"].as_str().unwrap(), std::time::Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
}
