//! Looking at a job: the result plays inline with Range, a thumbnail shows the input until the output
//! exists, previews of both sides come at the same size, and the page's before/after view shows real
//! frames in Chromium with its split where the slider puts it.
use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Width, height and packed RGB pixels of an image or of a video's first frame, as ffmpeg decodes it.
fn decode_rgb(path: &Path) -> (usize, usize, Vec<u8>) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sides = text.trim().split(',').map(|v| v.parse::<usize>().unwrap());
    let (width, height) = (sides.next().unwrap(), sides.next().unwrap());
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout.len(), width * height * 3);
    (width, height, out.stdout)
}

/// Standard deviation of the green channel over a rectangle: near 0 for a blank or flat area.
fn spread(pixels: &[u8], width: usize, x: std::ops::Range<usize>, y: std::ops::Range<usize>) -> f64 {
    let values: Vec<f64> = y.flat_map(|row| x.clone().map(move |col| (row, col))).map(|(row, col)| pixels[(row * width + col) * 3 + 1] as f64).collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64).sqrt()
}

/// Columns of a row that are the divider's yellow (#ffd400).
fn divider_columns(pixels: &[u8], width: usize, row: usize) -> Vec<usize> {
    (0..width)
        .filter(|&col| {
            let p = &pixels[(row * width + col) * 3..][..3];
            p[0] > 225 && (180..=240).contains(&p[1]) && p[2] < 60
        })
        .collect()
}

async fn save(client: &reqwest::Client, url: &str, path: &Path) -> reqwest::header::HeaderMap {
    let response = client.get(url).send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.unwrap();
    assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&bytes));
    std::fs::write(path, &bytes).unwrap();
    headers
}

fn screenshot(url: &str, profile: &Path, png: &Path) {
    let out = Command::new("chromium")
        .args([
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--window-size=1000,900", "--virtual-time-budget=8000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .output()
        .expect("chromium is installed by scripts/setup.sh --test");
    assert!(out.status.success() && png.exists(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_play_inline_thumbnails_and_previews_line_up_and_the_page_compares() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);

    // Before the output exists the thumbnail is the input's (176 px wide, the input's own width).
    let (status, slow) = upload_raw(&client, &server, "op=upscale&model=realesrgan-x4plus&scale=4&filename=slow.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{slow}");
    let slow_id = slow["id"].as_str().unwrap().to_string();
    let thumb = dir.path().join("input-thumb.png");
    let headers = save(&client, &server.url(&format!("/v1/jobs/{slow_id}/thumbnail")), &thumb).await;
    assert_eq!(headers["content-type"], "image/png");
    let (w, h, pixels) = decode_rgb(&thumb);
    assert_eq!((w, h), (176, 144));
    assert!(spread(&pixels, w, 0..w, 0..h) > 10.0, "the input's thumbnail is blank");
    client.post(server.url(&format!("/v1/jobs/{slow_id}/cancel"))).send().await.unwrap();
    let cancelled = wait_for_final(&client, &server, &slow_id, Duration::from_secs(120)).await;
    let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{slow_id}/preview?side=output"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("preview-unavailable")), "{cancelled} {body}");

    let job = run_job(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    let id = job["id"].as_str().unwrap().to_string();

    // The result inline, with Range; unknown parameters refused.
    let inline = client.get(server.url(&format!("/v1/jobs/{id}/result?inline=1"))).header("Range", "bytes=0-99").send().await.unwrap();
    assert_eq!(inline.status(), 206);
    assert!(inline.headers()["content-disposition"].to_str().unwrap().starts_with("inline"));
    assert_eq!(inline.bytes().await.unwrap().len(), 100);
    let download = client.get(server.url(&format!("/v1/jobs/{id}/result"))).send().await.unwrap();
    assert!(download.headers()["content-disposition"].to_str().unwrap().starts_with("attachment"));
    let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{id}/result?inlin=1"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unknown-parameter")), "{body}");

    // After: the output's thumbnail (352 wide, capped at 320); previews of both sides at the output's size.
    let thumb = dir.path().join("output-thumb.png");
    save(&client, &server.url(&format!("/v1/jobs/{id}/thumbnail")), &thumb).await;
    let (w, h, pixels) = decode_rgb(&thumb);
    assert_eq!((w, h), (320, 262));
    assert!(spread(&pixels, w, 0..w, 0..h) > 10.0, "the output's thumbnail is blank");
    let output_preview = dir.path().join("output.mp4");
    let headers = save(&client, &server.url(&format!("/v1/jobs/{id}/preview?side=output")), &output_preview).await;
    assert_eq!(headers["content-type"], "video/mp4");
    assert_eq!(std::fs::read(&output_preview).unwrap(), fetch(&client, &server, &job).await, "an H.264 output is served as it is");
    let input_preview = dir.path().join("input.mp4");
    save(&client, &server.url(&format!("/v1/jobs/{id}/preview?side=input")), &input_preview).await;
    let before = ffprobe(&input_preview);
    let after = ffprobe(&output_preview);
    assert_eq!((before.width, before.height, before.frames), (after.width, after.height, after.frames));
    let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{id}/preview?side=both"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid-query")), "{body}");

    // The page: both videos show frames, and the divider sits where the split puts it.
    let profile = dir.path().join("chromium-profile");
    let mut dividers = Vec::new();
    for split in [25, 75] {
        let png = dir.path().join(format!("page-{split}.png"));
        screenshot(&server.url(&format!("/#compare={id}&split={split}")), &profile, &png);
        let (width, height, pixels) = decode_rgb(&png);
        let rows: Vec<usize> = (0..height).filter(|&row| !divider_columns(&pixels, width, row).is_empty()).collect();
        assert!(rows.len() > 100, "no divider in the screenshot at split {split}");
        let middle = rows[rows.len() / 2];
        let columns = divider_columns(&pixels, width, middle);
        let divider = columns[columns.len() / 2];
        let (top, bottom) = (rows[0], *rows.last().unwrap());
        for (side, x) in [("before", 8..divider.saturating_sub(8)), ("after", divider + 8..divider + 160)] {
            assert!(spread(&pixels, width, x.clone(), top + 40..bottom - 10) > 10.0, "the {side} video shows no frame at split {split}");
        }
        dividers.push((divider, columns[0], top, bottom));
    }
    let (at25, at75) = (dividers[0].0 as f64, dividers[1].0 as f64);
    assert!(at75 - at25 > 200.0, "the divider did not move with the split: {dividers:?}");
}

/// Non-square pixels keep their shape: an input with a sample aspect ratio of 128:117 (as the test clip's
/// own) gives an output
/// and previews of both sides with the same ratio (so they display at the same shape), and the job's
/// input media names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_square_pixels_keep_their_shape_in_the_output_and_previews() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("anamorphic.mp4");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-frames:v", "3", "-vf", "setsar=sar=128/117:max=65535", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&clip)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(ffprobe(&clip).sample_aspect_ratio.as_deref(), Some("128:117"));
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let job = run_job(&client, &server, "op=upscale&scale=2&filename=anamorphic.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(job["input"]["media"]["sample_aspect_ratio"], "128:117", "{}", job["input"]);

    let output = dir.path().join("output.mp4");
    std::fs::write(&output, fetch(&client, &server, &job).await).unwrap();
    let probed = ffprobe(&output);
    assert_eq!((probed.width, probed.height, probed.sample_aspect_ratio.as_deref()), (352, 288, Some("128:117")), "{probed:?}");
    let id = job["id"].as_str().unwrap();
    for side in ["input", "output"] {
        let preview = dir.path().join(format!("preview-{side}.mp4"));
        save(&client, &server.url(&format!("/v1/jobs/{id}/preview?side={side}")), &preview).await;
        let probed = ffprobe(&preview);
        assert_eq!(probed.sample_aspect_ratio.as_deref(), Some("128:117"), "{side} preview: {probed:?}");
    }
}

/// A still image as input has a thumbnail: its one frame, whether the job is still waiting (the input's
/// side) or done (a one-frame output). A seek to the middle of a one-frame video wrote no picture, and
/// the thumbnail answered 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_image_input_has_a_thumbnail() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("frame.png");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-frames:v", "1"])
        .arg(&png)
        .status()
        .unwrap();
    assert!(status.success());
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=upscale&scale=2&filename=frame.png", std::fs::read(&png).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let input_thumb = dir.path().join("input-thumb.png");
    save(&client, &server.url(&format!("/v1/jobs/{id}/thumbnail")), &input_thumb).await;
    let (w, h, pixels) = decode_rgb(&input_thumb);
    assert!(spread(&pixels, w, 0..w, 0..h) > 10.0, "a blank thumbnail ({w}×{h})");
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(120)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let output_thumb = dir.path().join("output-thumb.png");
    save(&client, &server.url(&format!("/v1/jobs/{id}/thumbnail")), &output_thumb).await;
    let (w, h, pixels) = decode_rgb(&output_thumb);
    assert_eq!((w, h), (320, 262), "the output's thumbnail, at most 320 wide");
    assert!(spread(&pixels, w, 0..w, 0..h) > 10.0, "a blank thumbnail");
}
