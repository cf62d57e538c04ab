//! Output formats through the real server, checked with ffprobe and ffmpeg: each format's codec, pixel
//! format and container; the input's audio, subtitles and chapters kept (or dropped with
//! keep_audio=false); 16-bit PNG frames made from the float output (no 8-bit stage); an encoder this
//! ffmpeg lacks refused at submission; and an upscale's metrics=true PSNR against numpy's on the frames ffmpeg decodes.
use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// 3 frames of 176×144 with an AAC tone, an SRT subtitle and a chapter, in Matroska (which holds all three).
fn clip_with_streams(dir: &Path) -> PathBuf {
    let subtitles = dir.join("subs.srt");
    std::fs::write(&subtitles, "1\n00:00:00,000 --> 00:00:00,090\nhello\n").unwrap();
    let chapters = dir.join("chapters.txt");
    std::fs::write(&chapters, ";FFMETADATA1\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=90\ntitle=Start\n").unwrap();
    let clip = dir.join("clip.mkv");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-i"])
        .arg(&subtitles)
        .arg("-i")
        .arg(&chapters)
        .args(["-map", "0:v:0", "-map", "1:a:0", "-map", "2:s:0", "-map_chapters", "3", "-frames:v", "3", "-t", "0.1"])
        .args(["-c:v", "libx264", "-crf", "10", "-c:a", "aac", "-c:s", "srt"])
        .arg(&clip)
        .status()
        .unwrap();
    assert!(status.success());
    clip
}

/// ffprobe's streams (type, codec, pixel format, profile), container and chapter count.
fn probe_streams(path: &Path) -> Value {
    let output = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=codec_type,codec_name,pix_fmt,profile:format=format_name", "-show_chapters", "-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap()
}

fn codecs_of(probed: &Value, kind: &str) -> Vec<String> {
    probed["streams"].as_array().unwrap().iter().filter(|s| s["codec_type"] == kind).map(|s| s["codec_name"].as_str().unwrap().to_string()).collect()
}

async fn upscale_to(client: &reqwest::Client, server: &Server, clip: &Path, extra: &str, out: &Path) -> (Value, Value) {
    let query = format!("op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mkv{extra}");
    let job = run_job(client, server, &query, std::fs::read(clip).unwrap()).await;
    let response = client.get(server.url(job["output"]["url"].as_str().unwrap())).send().await.unwrap();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    std::fs::write(out, response.bytes().await.unwrap()).unwrap();
    let mut probed = probe_streams(out);
    probed["content_type"] = content_type.into();
    (job, probed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_format_is_written_with_the_inputs_streams() {
    let dir = tempfile::tempdir().unwrap();
    let clip = clip_with_streams(dir.path());
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let (status, health) = get_json(&client, &server.url("/healthz")).await;
    assert_eq!(status, 200);
    for format in ["h264", "h265", "prores", "ffv1", "png", "safetensors"] {
        assert_eq!(health["output_formats"][format], true, "{health}");
    }
    assert_eq!(health["default_output_format"], "h264");

    // (format, extension, content type, video codec, pixel format, subtitle codec in that container)
    let cases = [
        ("h265", "mp4", "video/mp4", "hevc", "yuv420p10le", "mov_text"),
        ("prores", "mov", "video/quicktime", "prores", "yuv422p10le", "mov_text"),
        ("ffv1", "mkv", "video/x-matroska", "ffv1", "gbrp16le", "subrip"),
    ];
    for (format, extension, content_type, codec, pix_fmt, subtitle) in cases {
        let out = dir.path().join(format!("out-{format}.{extension}"));
        let (job, probed) = upscale_to(&client, &server, &clip, &format!("&output_format={format}"), &out).await;
        assert_eq!(job["params"]["output_format"], format, "{job}");
        assert!(job["output"]["file_name"].as_str().unwrap().ends_with(&format!(".{extension}")), "{job}");
        let video = probed["streams"].as_array().unwrap().iter().find(|s| s["codec_type"] == "video").unwrap();
        assert_eq!((video["codec_name"].as_str(), video["pix_fmt"].as_str()), (Some(codec), Some(pix_fmt)), "{format}: {probed}");
        assert_eq!(probed["content_type"], content_type);
        assert_eq!(codecs_of(&probed, "audio"), ["aac"], "{format}: {probed}");
        assert_eq!(codecs_of(&probed, "subtitle"), [subtitle], "{format}: {probed}");
        assert_eq!(probed["chapters"].as_array().unwrap().len(), 1, "{format}: {probed}");
        if format == "prores" {
            assert_eq!(video["profile"], "HQ", "{probed}");
        }
    }
    assert_eq!(ffprobe(&dir.path().join("out-h265.mp4")).frames, 3);

    // keep_audio=false: the picture only.
    let out = dir.path().join("silent.mkv");
    let (_, probed) = upscale_to(&client, &server, &clip, "&output_format=ffv1&keep_audio=false", &out).await;
    assert_eq!(probed["streams"].as_array().unwrap().len(), 1, "{probed}");
    assert!(probed["chapters"].as_array().unwrap().is_empty(), "{probed}");

    // PNG: a zip of 16-bit RGB frames in order, made from the float output: an 8-bit stage widened
    // to 16 bits would leave every value a multiple of 257.
    let zip_path = dir.path().join("frames.zip");
    let (job, probed) = upscale_to(&client, &server, &clip, "&output_format=png", &zip_path).await;
    assert_eq!(probed["content_type"], "application/zip");
    assert!(job["output"]["media"].is_null(), "a zip is not a video: {job}");
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&zip_path).unwrap()).unwrap();
    let names: Vec<String> = (0..archive.len()).map(|i| archive.by_index(i).unwrap().name().to_string()).collect();
    assert_eq!(names, ["frame_000000.png", "frame_000001.png", "frame_000002.png"]);
    let first = dir.path().join("first.png");
    let mut png = Vec::new();
    archive.by_name("frame_000000.png").unwrap().read_to_end(&mut png).unwrap();
    std::fs::write(&first, &png).unwrap();
    // IHDR: width, height, bit depth 16, colour type 2 (RGB).
    assert_eq!((&png[16..20], &png[20..24], png[24], png[25]), (&352u32.to_be_bytes()[..], &288u32.to_be_bytes()[..], 16, 2));
    let raw = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-i"]).arg(&first).args(["-f", "rawvideo", "-pix_fmt", "rgb48le", "-"]).output().unwrap();
    let values: Vec<u16> = raw.stdout.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    assert_eq!(values.len(), 352 * 288 * 3);
    let off_the_8_bit_grid = values.iter().filter(|v| *v % 257 != 0).count();
    assert!(off_the_8_bit_grid > values.len() / 2, "only {off_the_8_bit_grid} of {} values are not 8-bit values widened", values.len());

    // Refusals at submission, with their codes.
    for (query, code) in [
        ("op=upscale&output_format=safetensors&filename=a.mkv", "invalid-output-format"),
        ("op=upscale&output_format=webm&filename=a.mkv", "invalid-output-format"),
        ("op=upscale&keep_audio=maybe&filename=a.mkv", "invalid-boolean"),
        ("op=upscale&metrics=sometimes&filename=a.mkv", "invalid-boolean"),
    ] {
        let (status, body) = upload_raw(&client, &server, query, std::fs::read(&clip).unwrap()).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some(code)), "{query}: {body}");
    }
}

/// An ffmpeg without libx265: the box says so in /healthz and refuses h265 jobs before queueing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoder_this_ffmpeg_lacks_is_refused_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("ffmpeg-without-x265");
    std::fs::write(&wrapper, "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -encoders ] && { ffmpeg \"$@\" | grep -v libx265; exit 0; }; done\nexec ffmpeg \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_FFMPEG", wrapper.to_str().unwrap())]);
    let client = client();
    let (_, health) = get_json(&client, &server.url("/healthz")).await;
    assert_eq!((health["output_formats"]["h265"].as_bool(), health["output_formats"]["h264"].as_bool()), (Some(false), Some(true)), "{health}");
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let (status, body) = upload_raw(&client, &server, "op=upscale&output_format=h265&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("output-format-unavailable")), "{body}");
    let (_, jobs) = get_json(&client, &server.url("/v1/jobs")).await;
    assert!(jobs["jobs"].as_array().unwrap().is_empty(), "nothing was queued: {jobs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upscale_metrics_match_numpys_psnr_of_the_output_scaled_back() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let out = dir.path().join("out.mkv");
    // Lossless output, so ffmpeg measures the very frames the job measured.
    let (job, _) = upscale_to(&client, &server, &clip, "&output_format=ffv1&metrics=true", &out).await;
    let metrics = &job["metrics"];
    assert_eq!(metrics["frames_compared"], 3, "{job}");
    let (ours, ssim) = (metrics["psnr_db"].as_f64().unwrap(), metrics["ssim"].as_f64().unwrap());
    let args = [out.as_os_str(), clip.as_os_str(), "176".as_ref(), "144".as_ref(), "2".as_ref()];
    let reference: f64 = run_python("scripts/fixtures/psnr_scaled_back.py", &args).trim().parse().unwrap();
    println!("metrics=true: PSNR {ours:.4} dB, SSIM {ssim:.4}; numpy on ffmpeg's frames: {reference:.4} dB");
    assert!((ours - reference).abs() < 0.01, "ours {ours:.4} dB, numpy {reference:.4} dB");
    assert!(ours > 25.0 && ssim > 0.8 && ssim <= 1.0, "{metrics}");

    let (job, _) = upscale_to(&client, &server, &clip, "", &dir.path().join("plain.mp4")).await;
    assert!(job["metrics"].is_null(), "metrics only when asked: {job}");
}
